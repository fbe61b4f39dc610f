"""What every training loop (GRPO, SFT) shares: seeding, the learning-rate schedule, the
progress bar and Ctrl-C handling that saves before it stops."""

from __future__ import annotations

import math
import random
import signal
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def lr_factor(step: int, total: int, warmup: int, schedule: str) -> float:
    """Multiplier of the base learning rate at `step`: linear warm-up, then constant,
    cosine or linear decay to zero at `total`."""
    if warmup and step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    if schedule == "cosine":
        return 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    if schedule == "linear":
        return max(0.0, 1.0 - progress)
    return 1.0


def step_progress(console: Console) -> Progress:
    """A bar over training steps with a free-text status field."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
    )


class GracefulStop:
    """Ctrl-C once: finish the step, save, stop (`requested`); twice: quit at once."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.requested = False
        self._previous: Any = signal.SIG_DFL

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        self.console.print(
            "[yellow]Ctrl-C: finishing this step, then saving a checkpoint "
            "(press again to quit without saving)[/]"
        )

    def install(self) -> None:
        self._previous = signal.signal(signal.SIGINT, self._handle)

    def restore(self) -> None:
        signal.signal(signal.SIGINT, self._previous)


class TrainingRun:
    """The end of a run both trainers share: the Ctrl-C flag, the finished mark, the summary."""

    console: Console
    stop: GracefulStop
    run_dir: Path
    step: int

    @property
    def stop_requested(self) -> bool:
        return self.stop.requested

    @stop_requested.setter
    def stop_requested(self, value: bool) -> None:
        self.stop.requested = value

    def finish(self, report: Path, summary: dict[str, Any] | None = None) -> None:
        """Mark a completed run finished (recipes skip it) and say where everything is."""
        from agenttrain.run import checkpoint

        if not self.stop_requested:
            checkpoint.mark_finished(self.run_dir, self.step, summary)
        state = "stopped at" if self.stop_requested else "finished"
        self.console.print(
            f"[bold]{state} step {self.step}[/]\nRun: {self.run_dir}\nReport: {report}\n"
            f"Checkpoint: {checkpoint.latest(self.run_dir)}"
        )
