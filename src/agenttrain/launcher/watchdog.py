"""`python -m agenttrain.launcher.watchdog STATE TIMEOUT`: started by the launcher in its own
session with the read end of a pipe as stdin. The launcher alone holds the write end, so
stdin reaches end-of-file exactly when the launcher exits, however it dies (SIGKILL
included); the watchdog then stops every process group the state file records, unless the
launcher marked the launch finished (it stopped them itself)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from agenttrain.launcher.state import LaunchState, stop_recorded


def watch(state_file: Path, timeout_s: float) -> list[str]:
    """Block until the launcher is gone, then stop what it left; returns the names stopped."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.stdin.buffer.read()
    if not state_file.exists():
        return []
    state = LaunchState.load(state_file)
    return [] if state.finished else stop_recorded(state, timeout_s)


if __name__ == "__main__":
    stopped = watch(Path(sys.argv[1]), float(sys.argv[2]))
    if stopped:
        print(f"launcher gone; stopped {', '.join(stopped)}", flush=True)
