"""Start environment servers as child processes and wait until they answer.

Used by `agenttrain demo`, the tests and the benchmarks; the servers are real uvicorn
processes on loopback, exactly what a user starts with `agenttrain serve`.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

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
    deadline = time.monotonic() + timeout_s
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith(READY_PREFIX):
        process.kill()
        process.wait()
        tail = log_path.read_text(errors="replace")[-2000:]
        raise ServerStartError(f"`{' '.join(command)}` did not start: {(line + tail).strip()}")
    handle = ServerProcess(env, line[len(READY_PREFIX) :].strip(), process, log_path)
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if http_get(f"{handle.url}/health")[0] == 200:
                return handle
        if process.poll() is not None:
            raise ServerStartError(
                f"server for {env} exited with code {process.returncode}: {handle.log_tail()}"
            )
        time.sleep(0.05)
    handle.stop()
    raise ServerStartError(f"server for {env} at {handle.url} not ready after {timeout_s:.0f} s")


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
