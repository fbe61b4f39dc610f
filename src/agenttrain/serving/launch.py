"""Start environment servers as child processes and wait until they answer.

Used by `agenttrain demo`, `agenttrain launch`, the tests and the benchmarks; the servers are
real uvicorn processes on loopback, exactly what a user starts with `agenttrain serve`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from agenttrain.serving.runner import READY_PREFIX, http_get


class ServerStartError(RuntimeError):
    pass


@dataclass
class ServerProcess:
    env: str
    url: str
    process: subprocess.Popen[str]
    log_path: Path
    """The server's stderr (uvicorn and environment errors)."""

    def log_tail(self, chars: int = 2000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask for a graceful shutdown (sessions closed), then kill if it hangs."""
        if self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_server(
    env: str,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    extra_args: Sequence[str] = (),
    timeout_s: float = 60.0,
) -> ServerProcess:
    """Start `agenttrain serve ENV` in a child process and return once it answers /health."""
    command = [
        sys.executable,
        "-m",
        "agenttrain",
        "serve",
        env,
        "--host",
        host,
        "--port",
        str(port),
        *extra_args,
    ]
    log_file = tempfile.NamedTemporaryFile(  # noqa: SIM115 - it outlives this function
        prefix=f"agenttrain-{env}-server-", suffix=".log", delete=False
    )
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=log_file,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    log_file.close()
    log_path = Path(log_file.name)
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith(READY_PREFIX):
        process.kill()
        process.wait()
        tail = log_path.read_text(errors="replace")[-2000:]
        raise ServerStartError(f"`{' '.join(command)}` did not start: {(line + tail).strip()}")
    handle = ServerProcess(env, line[len(READY_PREFIX) :].strip(), process, log_path)
    try:
        wait_until_healthy(f"{handle.url}/health", process, timeout_s, log_path)
    except ServerStartError:
        handle.stop()
        raise
    return handle


def wait_until_healthy(
    health_url: str, process: subprocess.Popen, timeout_s: float, log_path: Path
) -> None:
    """Return once `health_url` answers 200; raise ServerStartError (with the log's tail) if
    the process exits first or the time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if http_get(health_url)[0] == 200:
                return
        if process.poll() is not None:
            tail = log_path.read_text(errors="replace")[-2000:].strip()
            raise ServerStartError(
                f"`{_shown(process.args)}` exited with code {process.returncode} before "
                f"{health_url} answered; {log_path} ends with:\n{tail}"
            )
        time.sleep(0.05)
    raise ServerStartError(f"{health_url} did not answer within {timeout_s:.0f} s; see {log_path}")


def _shown(args: object) -> str:
    return " ".join(map(str, args)) if isinstance(args, (list, tuple)) else str(args)


def spawn_group(command: Sequence[str], log_path: Path) -> subprocess.Popen[bytes]:
    """Start `command` as the leader of a new session, so of its own process group, its
    stdout and stderr appended to `log_path`. A terminal's Ctrl-C then reaches only the
    parent, which stops the whole group, grandchildren included, with `stop_group`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        return subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )


def group_alive(pgid: int) -> bool:
    """Whether a live process of the group is left. Zombies do not count: once their parent
    is gone they wait for an init that may never reap them."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    for process in psutil.process_iter(["status"]):
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if process.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(process.pid) == pgid:
                return True
    return False


def stop_group(
    pgid: int, timeout_s: float = 10.0, reap: Callable[[], object] = lambda: None
) -> None:
    """SIGTERM to every process of the group, SIGKILL to those left after `timeout_s`.
    `reap` collects the leader's exit status when the caller is its parent (a zombie leader
    would otherwise keep the group alive)."""
    for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            reap()
            if not group_alive(pgid):
                return
            time.sleep(0.05)


@contextlib.contextmanager
def running_servers(
    env: str, count: int = 1, extra_args: Sequence[str] = ()
) -> Iterator[list[str]]:
    """`count` servers of `env` on free loopback ports, stopped on exit; yields their URLs."""
    servers: list[ServerProcess] = []
    try:
        for _ in range(count):
            servers.append(start_server(env, extra_args=extra_args))
        yield [s.url for s in servers]
    finally:
        for server in servers:
            server.stop()
