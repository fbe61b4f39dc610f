"""What every training loop (GRPO, SFT) shares: the run's set-up (folder, resume point,
seeds, config record, metric loggers), the learning-rate schedule, the progress display (a
bar on a terminal, plain lines in a log) and Ctrl-C / SIGTERM handling that saves before it
stops."""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import gc
import math
import random
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from pydantic import BaseModel
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

if TYPE_CHECKING:
    from agenttrain.run.tracking import Tracker


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def release_freed_memory() -> None:
    """Hand memory that finished work freed back to the system. glibc keeps freed heap memory
    for reuse (in a TextCraft recipe run 4.3 of 6.2 GB resident after SFT were such, 6.4 of 9.3
    after GRPO), and the next stage or phase started on top of it. Elsewhere than glibc: a
    collection."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc (macOS, musl)
        ctypes.CDLL("libc.so.6").malloc_trim(0)


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


@dataclass
class _PlainTask:
    description: str
    total: int
    completed: int
    every: int
    fields: dict[str, Any]


class PlainProgress:
    """Progress for a log file or a pipe, where a live bar shows nothing until the end: one
    plain line per completed step (at most `max_lines` per task) and per stage (a change of
    the fields without a step done). Same calls as rich's Progress."""

    def __init__(self, console: Console, fields: str, max_lines: int | None = None) -> None:
        self.console = console
        self.fields = fields
        self.max_lines = max_lines
        self._tasks: list[_PlainTask] = []
        self._started = time.monotonic()

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, description: str, total: int, completed: int = 0, **fields: Any) -> int:
        every = math.ceil(total / self.max_lines) if self.max_lines else 1
        self._tasks.append(_PlainTask(description, total, completed, max(1, every), fields))
        return len(self._tasks) - 1

    def update(self, task_id: int, advance: int = 0, **fields: Any) -> None:
        task = self._tasks[task_id]
        stage = any(task.fields.get(key) != value for key, value in fields.items())
        task.fields.update(fields)
        task.completed += advance
        step_due = task.completed % task.every == 0 or task.completed >= task.total
        if (advance and step_due) or (not advance and stage):
            self.console.print(self._line(task), markup=False, highlight=False, soft_wrap=True)

    def _line(self, task: _PlainTask) -> str:
        elapsed = datetime.timedelta(seconds=round(time.monotonic() - self._started))
        status = " ".join(self.fields.format(**task.fields).split())
        parts = (f"{task.description} {task.completed}/{task.total}", status, str(elapsed))
        return " · ".join(part for part in parts if part)


def progress_display(
    console: Console, fields: str, max_lines: int | None = None
) -> Progress | PlainProgress:
    """A live bar on a terminal, plain lines anywhere else (a log file, `nohup`, a pipe).
    `fields` is a format string over the task's fields, e.g. "solved {solved}"."""
    if not console.is_terminal:
        return PlainProgress(console, fields, max_lines)
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(re.sub(r"\{(\w+)\}", r"{task.fields[\1]}", fields)),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
    )


def step_progress(console: Console) -> Progress | PlainProgress:
    """Progress over training steps with a free-text status field."""
    return progress_display(console, "{status}")


STOP_SIGNALS = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}


class GracefulStop:
    """Ctrl-C or SIGTERM (what cluster schedulers send before they kill a job) once: finish
    the step, save, stop (`requested`; exit status 128 + the signal's number, 130 or 143);
    a second signal quits at once."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.requested = False
        self.signum: int = signal.SIGINT
        self._previous: dict[int, Any] = {}

    @property
    def exit_code(self) -> int:
        """What the process exits with after a requested stop (the shell's convention)."""
        return 128 + int(self.signum)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        self.signum = signum
        self.console.print(
            f"[yellow]{STOP_SIGNALS[signum]}: finishing this step, then saving a checkpoint "
            "(send it again to quit without saving)[/]"
        )

    def install(self) -> None:
        self._previous = {signum: signal.signal(signum, self._handle) for signum in STOP_SIGNALS}

    def restore(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)


class RunFailed(RuntimeError):
    """A run stopped because going on would train on (next to) nothing; the message says why.
    The report is written first; the failed step is not saved."""

    exit_code = 3


class TrainingRun:
    """What both trainers share around their own work: the set-up of the run (`_open_run`,
    then `_set_up_run`, then `_start_training` in `_train`), the stop flag, the finished
    mark, the summary."""

    console: Console
    stop: GracefulStop
    run_dir: Path
    device: torch.device
    step: int
    config: BaseModel
    resume_from: Path | None
    config_changes: dict[str, tuple[Any, Any]]
    model: torch.nn.Module
    tokenizer: Any
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler

    def _open_run(self, config: Any, console: Console | None) -> None:
        """The run's config, console and folder, refused while another process trains in
        it. First of all, before anything is loaded."""
        from agenttrain.run.lock import ensure_free

        self.config = config
        self.console = console or Console()
        self.run_dir = config.run.out_dir
        ensure_free(self.run_dir)

    def _set_up_run(self, allow_config_change: bool) -> None:
        """The device, the checkpoint to resume from (refusing changed settings unless
        allowed), the seeds and the Ctrl-C / SIGTERM handler; before the model is built."""
        from agenttrain.run import checkpoint

        config: Any = self.config
        self.device = torch.device(config.model.device)
        self.resume_from = checkpoint.resume_point(self.run_dir, config.trainer.resume)
        self.config_changes = self._check_resume_config(allow_config_change)
        seed_everything(config.run.seed)
        self.stop = GracefulStop(self.console)

    def _start_training(self, preamble: str | None = None) -> Tracker:
        """The start of `_train`: config.yaml recorded, the metric loggers opened (the
        tracker to log to, and to close), `preamble` and the resume point said, Ctrl-C handled."""
        from agenttrain import config as config_io
        from agenttrain.run.tracking import Tracker

        config: Any = self.config
        self.record_config(config_io.dump(config))
        tracker = Tracker(
            config.trainer.loggers,
            self.run_dir,
            config.run.name,
            config.model_dump(mode="json"),
            resume_step=self.step,
        )
        if preamble is not None:
            self.console.print(preamble)
        if self.resume_from is not None:
            self.console.print(
                f"resuming {self.run_dir} from {self.resume_from.name} (step {self.step})"
            )
        self.stop.install()
        return tracker

    def train(self) -> Path:
        """Train in the run folder, as its only writer (`run.lock`); returns the folder."""
        from agenttrain.run.lock import run_lock

        self.run_dir.mkdir(parents=True, exist_ok=True)
        with run_lock(self.run_dir, self.console):
            return self._train()

    def _train(self) -> Path:
        raise NotImplementedError

    def _restore_training(self, folder: Path) -> dict[str, Any]:
        """Optimizer, schedule, random states and step from checkpoint `folder` (the model
        was built from it); the checkpoint's state, for what else the trainer keeps there."""
        from agenttrain.run import checkpoint

        state = checkpoint.load_state(folder)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        checkpoint.restore_rng(state["rng"])
        self.step = int(state["step"])
        return state

    def _save_checkpoint(self, state: dict[str, Any], generation: dict[str, Any]) -> Path:
        """Checkpoint `step-N`: model, tokenizer, optimizer, schedule, random states, the
        trainer's own `state`, and the `generation` settings an evaluation plays it with."""
        from agenttrain.run import checkpoint

        config: Any = self.config
        return checkpoint.save(
            self.run_dir,
            self.step,
            self.model,
            self.tokenizer,
            config.model.path,
            {
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                **state,
            },
            config.trainer.keep_checkpoints,
            generation=generation,
        )

    def _check_resume_config(self, allow_change: bool) -> dict[str, tuple[Any, Any]]:
        """Before anything is loaded: refuse to resume with other settings than the run's
        (unless allowed or harmless); the changes, if any."""
        from agenttrain.run import history

        if self.resume_from is None:
            return {}
        return history.check_resume_config(
            self.run_dir, self.config.model_dump(mode="json"), allow_change, type(self.config)
        )

    def record_config(self, text: str) -> None:
        """Write the run's config.yaml, keeping a different earlier one in config-history/."""
        from agenttrain.run import history

        kept = history.record_config(self.run_dir, text, self.step)
        if self.config_changes:
            self.console.print(
                f"[yellow]config changed since step {self.step}:[/] "
                f"{history.describe_changes(self.config_changes)}",
                highlight=False,
            )
        if kept is not None:
            self.console.print(f"previous config kept in {kept}")

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
            f"Checkpoint: {checkpoint.latest(self.run_dir)}",
            soft_wrap=True,  # paths broken over lines cannot be copied
        )
