"""Config sections every training recipe shares (`run:`), and their strict base class."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict


class Section(BaseModel):
    """A config section: unknown keys are errors that name the key and the allowed ones."""

    model_config = ConfigDict(extra="forbid")


class RunConfig(Section):
    name: str = "run"
    out_dir: Path = Path("runs/run")
    """The run folder: resolved config, metrics, checkpoints, trajectories, report."""
    seed: int = 0


RESUME_VALUES = "auto, never, or a checkpoint folder (one holding trainer_state.pt)"


def _resume_mode(value: Any) -> Any:
    """Name the allowed values where YAML turned `yes`/`no`/`true` into a boolean."""
    if isinstance(value, bool):
        raise ValueError(f"allowed values are {RESUME_VALUES}; YAML reads yes/no as booleans")
    return value


ResumeMode = Annotated[str, BeforeValidator(_resume_mode)]
"""`trainer.resume`: auto (continue the run folder's newest checkpoint, if any), never, or a
checkpoint folder."""
