"""The launch's state file (`<run>/launch/state.json`): every process group it started, so
`agenttrain launch --status/--stop` and the watchdog act on exactly those and nothing else."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from agenttrain.serving.launch import group_alive, stop_group
from agenttrain.serving.runner import http_get

LAUNCH_DIR = "launch"
STATE_FILE = "state.json"


@dataclass
class ProcessRecord:
    name: str
    role: str
    """service or training."""
    command: list[str]
    pid: int
    created: float
    """The leader's start time: a recorded pid later reused by another program is not ours."""
    url: str | None = None
    health_route: str | None = None
    log: str | None = None
    restarts: int = 0

    @property
    def pgid(self) -> int:
        """Each child leads its own session, so its group id is its pid."""
        return self.pid

    def group_is_ours(self) -> bool:
        """Whether the group still runs and was started by the launch (not a reused id)."""
        if not group_alive(self.pgid):
            return False
        leader = _started_at(self.pid)
        return leader is None or leader == self.created

    def answers(self) -> bool | None:
        """Whether the health route answers 200 (None: not an HTTP service)."""
        if self.url is None or self.health_route is None:
            return None
        try:
            return http_get(f"{self.url}{self.health_route}")[0] == 200
        except OSError:
            return False


@dataclass
class LaunchState:
    launcher_pid: int
    launcher_created: float
    processes: list[ProcessRecord] = field(default_factory=list)
    finished: bool = False
    """Set once the launcher has stopped everything itself; the watchdog then does nothing."""

    def save(self, path: Path) -> None:
        """Written whole and renamed, so a reader never sees half a file."""
        path.parent.mkdir(parents=True, exist_ok=True)
        scratch = path.with_suffix(".tmp")
        scratch.write_text(json.dumps(asdict(self), indent=1))
        os.replace(scratch, path)

    @classmethod
    def load(cls, path: Path) -> LaunchState:
        data = json.loads(path.read_text())
        processes = [ProcessRecord(**record) for record in data.pop("processes")]
        return cls(processes=processes, **data)

    def record(self, entry: ProcessRecord) -> None:
        """Add a process, or replace the earlier one of the same name in place (a restart)."""
        names = [p.name for p in self.processes]
        if entry.name in names:
            self.processes[names.index(entry.name)] = entry
        else:
            self.processes.append(entry)

    def launcher_running(self) -> bool:
        return _started_at(self.launcher_pid) == self.launcher_created


def state_path(run_dir: Path) -> Path:
    return run_dir / LAUNCH_DIR / STATE_FILE


def process_created(pid: int) -> float:
    return psutil.Process(pid).create_time()


def _started_at(pid: int) -> float | None:
    """When the live (not zombie) process `pid` started; None if there is none. A group whose
    leader is gone cannot have been reused: a new group of that id needs a new leader."""
    try:
        process = psutil.Process(pid)
        return None if process.status() == psutil.STATUS_ZOMBIE else process.create_time()
    except psutil.NoSuchProcess:
        return None


def stop_recorded(state: LaunchState, timeout_s: float) -> list[str]:
    """Stop every recorded group that is still ours, training first (so it can save while the
    services still answer); returns the names stopped."""
    stopped = []
    ordered = sorted(state.processes, key=lambda p: p.role != "training")
    for entry in ordered:
        if entry.group_is_ours():
            stop_group(entry.pgid, timeout_s)
            stopped.append(entry.name)
    return stopped


def stop_launch(run_dir: Path, timeout_s: float = 30.0) -> list[str]:
    """`agenttrain launch --stop RUN`: ask the launcher to stop (SIGTERM: the training saves,
    then the services stop), then stop whatever recorded group is left."""
    state = read_state(run_dir)
    stopped = []
    if state.launcher_running():
        with contextlib.suppress(ProcessLookupError):
            os.kill(state.launcher_pid, signal.SIGTERM)
        stopped.append(f"launcher (pid {state.launcher_pid})")
        deadline = time.monotonic() + timeout_s + 10
        while time.monotonic() < deadline and state.launcher_running():
            time.sleep(0.1)
    return stopped + stop_recorded(read_state(run_dir), timeout_s)


def read_state(run_dir: Path) -> LaunchState:
    path = state_path(run_dir)
    if not path.exists():
        raise FileNotFoundError(f"no launch in {run_dir}: {path} does not exist")
    return LaunchState.load(path)


def status_rows(state: LaunchState) -> list[tuple[str, ...]]:
    """`agenttrain launch --status`: per process, (name, pid, alive, url, answering,
    restarts)."""
    launcher = state.launcher_running()
    rows = [("launcher", str(state.launcher_pid), _yes(launcher), "-", "-", "-")]
    for entry in state.processes:
        answering = entry.answers()
        rows.append(
            (
                entry.name,
                str(entry.pid),
                _yes(entry.group_is_ours()),
                entry.url or "-",
                "-" if answering is None else _yes(answering),
                str(entry.restarts),
            )
        )
    return rows


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"
