"""Stopping SFT once its held-out loss stops improving (`trainer.stop_patience`).

A fixed epoch count either stops early or over-fits the demonstrations, and GRPO after SFT
depends on where it stopped (docs/results.md: a second epoch on TextCraft's 160
demonstrations was worth as much as the GRPO stage, held-out loss 0.136 -> 0.077). With a
patience the run measures the held-out loss every `eval_freq` steps and stops after
`patience` measurements in a row that did not beat the best by more than `min_delta`;
`optim.epochs` is then the most it trains. The state is saved in every checkpoint, so a
resumed run counts on, and rerunning a run that stopped does not train it further.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class HeldOutStop:
    patience: int | None
    min_delta: float = 0.0
    best: float | None = None
    best_step: int = 0
    since_best: int = 0

    def observe(self, loss: float, step: int) -> None:
        """Count one held-out measurement (step 0: before training)."""
        if self.best is None or loss < self.best - self.min_delta:
            self.best, self.best_step, self.since_best = loss, step, 0
        else:
            self.since_best += 1

    @property
    def reached(self) -> bool:
        """Whether the run should stop: `patience` measurements without improvement."""
        return self.patience is not None and self.since_best >= self.patience

    def note(self, step: int, total: int) -> str:
        """The line that says why a run stopped before its last planned step."""
        return (
            f"held-out loss has not improved on {self.best:.4f} (step {self.best_step}) for "
            f"{self.since_best} measurements: stopped at step {step} of {total}"
        )

    def state(self) -> dict[str, Any]:
        return {"best": self.best, "best_step": self.best_step, "since_best": self.since_best}

    def restore(self, state: dict[str, Any] | None) -> None:
        """From a checkpoint's state (none in checkpoints written before patience existed)."""
        if state:
            self.best, self.best_step = state["best"], int(state["best_step"])
            self.since_best = int(state["since_best"])
