"""Config sections every training recipe shares (`run:`), and their strict base class."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A config section: unknown keys are errors that name the key and the allowed ones."""

    model_config = ConfigDict(extra="forbid")


class RunConfig(Section):
    name: str = "run"
    out_dir: Path = Path("runs/run")
    """The run folder: resolved config, metrics, checkpoints, trajectories, report."""
    seed: int = 0
