"""Checkpoints: Hugging Face weights (full, or a PEFT adapter) with tokenizer, plus the
optimizer, scheduler, RNG states and data position, so a run continues exactly.

    <run>/checkpoints/step-N/model/            loadable with transformers / PEFT as is
    <run>/checkpoints/step-N/trainer_state.pt  optimizer, scheduler, RNG, step, extra state
    <run>/checkpoints/latest                   the newest complete checkpoint's name

A checkpoint is written to a temporary folder and renamed when complete, so a crash while
saving never leaves a half checkpoint behind; only the newest `keep` are kept.
"""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agenttrain.atomic import atomic_folder
from agenttrain.run.config import RESUME_VALUES

PREFIX = "step-"
GENERATION = "generation"
"""Key of model/agenttrain.json holding the settings the model was trained to act with."""


def checkpoints_dir(run_dir: Path) -> Path:
    return run_dir / "checkpoints"


def rng_state() -> dict[str, Any]:
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }


def restore_rng(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def is_peft(model: torch.nn.Module) -> bool:
    return hasattr(model, "peft_config")


def save(
    run_dir: Path,
    step: int,
    model: torch.nn.Module,
    tokenizer: Any,
    base_model: str,
    state: dict[str, Any],
    keep: int,
    generation: Mapping[str, Any] | None = None,
) -> Path:
    """Write checkpoint `step` atomically and prune old ones; returns its folder.
    `generation`: how the model was asked to act (env, action format, token and turn limits,
    system prompt), recorded in model/agenttrain.json so `agenttrain eval` asks the same."""
    root = checkpoints_dir(run_dir)
    final = root / f"{PREFIX}{step}"
    try:
        _write(final, step, model, tokenizer, base_model, state, generation)
    except (OSError, RuntimeError) as failure:  # torch reports a failed write as RuntimeError
        free = shutil.disk_usage(root if root.exists() else run_dir).free / 2**20
        raise CheckpointError(
            f"could not save checkpoint {final} ({type(failure).__name__}: "
            f"{str(failure).splitlines()[0] if str(failure) else failure!r}); {free:.0f} MiB "
            "free there. Free some space (or set trainer.keep_checkpoints lower), then run the "
            "same command to resume from the previous checkpoint"
        ) from None
    (root / "latest").write_text(final.name)
    for old in sorted(root.glob(f"{PREFIX}*"), key=_step_of)[:-keep]:
        shutil.rmtree(old)
    return final


def _write(
    final: Path,
    step: int,
    model: torch.nn.Module,
    tokenizer: Any,
    base_model: str,
    state: dict[str, Any],
    generation: Mapping[str, Any] | None,
) -> None:
    with atomic_folder(final) as staging:
        model_dir = staging / "model"
        model.save_pretrained(model_dir)
        tokenizer.save_pretrained(model_dir)
        meta = {"step": step, "base_model": base_model, "adapter": is_peft(model)}
        if generation:
            meta[GENERATION] = {k: v for k, v in generation.items() if v is not None}
        (model_dir / "agenttrain.json").write_text(json.dumps(meta, indent=2))
        torch.save({**state, "step": step, "rng": rng_state()}, staging / "trainer_state.pt")


def _step_of(folder: Path) -> int:
    return int(folder.name.removeprefix(PREFIX))


def latest(run_dir: Path) -> Path | None:
    """The newest complete checkpoint of a run, if any."""
    root = checkpoints_dir(run_dir)
    pointer = root / "latest"
    if pointer.exists() and (root / pointer.read_text().strip()).is_dir():
        return root / pointer.read_text().strip()
    found = sorted(root.glob(f"{PREFIX}*"), key=_step_of) if root.is_dir() else []
    return found[-1] if found else None


class CheckpointError(RuntimeError):
    """A run folder or checkpoint cannot be used as asked."""


def resume_point(run_dir: Path, mode: str) -> Path | None:
    """The checkpoint to continue from: `auto` (the run's newest, if any), `never` (refusing a
    run folder that already has checkpoints), or an explicit checkpoint folder."""
    if mode == "never":
        if latest(run_dir) is not None:
            raise CheckpointError(
                f"{run_dir} already holds checkpoints and trainer.resume=never; choose "
                "another run.out_dir, or trainer.resume=auto to continue it"
            )
        return None
    if mode == "auto":
        return latest(run_dir)
    path = Path(mode)
    if not (path / "trainer_state.pt").exists():
        raise CheckpointError(f"trainer.resume={mode!r}: allowed values are {RESUME_VALUES}")
    return path


def load_state(checkpoint: Path) -> dict[str, Any]:
    return torch.load(checkpoint / "trainer_state.pt", weights_only=False)


FINISHED = "finished.json"


def mark_finished(run_dir: Path, step: int, summary: dict[str, Any] | None = None) -> None:
    """Record that a run completed every step (recipes skip finished stages)."""
    newest = latest(run_dir)
    record = {"step": step, "checkpoint": str(newest) if newest else None, "eval": summary}
    (run_dir / FINISHED).write_text(json.dumps(record, indent=2))


def finished(run_dir: Path) -> dict[str, Any] | None:
    """What `mark_finished` recorded, or None for a run that has not finished."""
    path = run_dir / FINISHED
    return json.loads(path.read_text()) if path.exists() else None
