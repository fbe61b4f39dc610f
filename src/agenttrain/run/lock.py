"""One writer per run folder.

Two `agenttrain train` processes on one `run.out_dir` both used to finish with exit 0, their
steps interleaved in `metrics.jsonl` and the checkpoints from whichever wrote last. A run
takes `<run>/.agenttrain.lock` (its PID, host, start time and command) for its whole life; a
second writer fails at once naming the folder and the process that holds it. A lock left by
a process that is gone (killed, crashed machine) is taken over with a message.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
from rich.console import Console

LOCK_FILE = ".agenttrain.lock"


class RunFolderBusy(RuntimeError):
    """Another live process writes this run folder."""


@contextmanager
def run_lock(folder: Path, console: Console | None = None) -> Iterator[None]:
    """Hold `folder`'s lock for the block (re-entrant within one process)."""
    path = folder / LOCK_FILE
    me = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.time(),
        "command": " ".join(sys.argv),
    }
    if _owner(path).get("pid") == me["pid"] and _owner(path).get("host") == me["host"]:
        yield  # this process holds it already (a recipe's stage inside the recipe)
        return
    _acquire(path, me, console)
    try:
        yield
    finally:
        if _owner(path).get("pid") == me["pid"]:
            path.unlink(missing_ok=True)


def ensure_free(folder: Path) -> None:
    """Fail early (before a model is loaded) when `folder` cannot be a run folder (it is a
    file) or another live process writes it."""
    if folder.exists() and not folder.is_dir():
        raise RunFolderBusy(f"run.out_dir {folder} is a file, not a folder; choose another")
    owner = _owner(folder / LOCK_FILE)
    host = socket.gethostname()
    mine = owner.get("pid") == os.getpid() and owner.get("host") == host
    if owner and not mine and _alive(owner, host):
        raise RunFolderBusy(_busy_message(folder, owner))


def _acquire(path: Path, me: dict[str, Any], console: Console | None) -> None:
    for _ in range(50):  # a lock being written or taken over: look again
        try:
            handle = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            owner = _owner(path)
            if not owner:
                time.sleep(0.05)  # its writer has not written it yet
                if not _owner(path):
                    path.unlink(missing_ok=True)  # empty for good: a writer died mid-way
                continue
            if _alive(owner, me["host"]):
                raise RunFolderBusy(_busy_message(path.parent, owner)) from None
            if console is not None:
                console.print(
                    f"[yellow]{path.parent}: taking over the lock of PID {owner.get('pid')}, "
                    "which is no longer running[/]",
                    highlight=False,
                )
            path.unlink(missing_ok=True)
            continue
        with os.fdopen(handle, "w") as file:
            json.dump(me, file)
        return
    raise RunFolderBusy(f"{path.parent}: could not take {path}")


def _owner(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _alive(owner: dict[str, Any], host: str) -> bool:
    """Whether the lock's owner still runs. On another host it cannot be checked: assume so."""
    if owner.get("host") != host:
        return True
    try:
        process = psutil.Process(int(owner.get("pid", -1)))
        # a PID reused by a process started after the lock is not the owner
        return process.create_time() <= float(owner.get("started", 0)) + 1.0
    except psutil.AccessDenied:
        return True  # it exists; another user's process
    except (psutil.NoSuchProcess, ValueError):
        return False


def _busy_message(folder: Path, owner: dict[str, Any]) -> str:
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(owner.get("started", 0))))
    return (
        f"{folder} is being written by another run: PID {owner.get('pid')} on "
        f"{owner.get('host')} since {since} ({owner.get('command', '?')}). Wait for it to end, "
        "stop it, or choose another run.out_dir"
    )
