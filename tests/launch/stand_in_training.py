"""A stand-in for `agenttrain train` in launcher tests (`launch.train_command`): records the
arguments it got and its pid, then waits until the file `finish` appears in its run folder
(exit 0) or a signal stops it (exit 128+N, as the trainer does)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from agenttrain.config import load
from agenttrain.rl.config import TrainConfig


def main(arguments: list[str]) -> int:
    config = load(TrainConfig, Path(arguments[0]), arguments[1:])  # as `agenttrain train` reads it
    out_dir = config.run.out_dir
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda number, _frame: sys.exit(128 + number))
    record = {"arguments": arguments, "pid": os.getpid(), "pgid": os.getpgid(0)}
    (out_dir / "training.json").write_text(json.dumps(record))
    while not (out_dir / "finish").exists():
        time.sleep(0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
