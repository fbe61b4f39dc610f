"""A run folder's configuration over time: a resumed run is compared with the config it was
trained with, and a changed config is refused unless asked for, so one run never mixes two
sets of settings unknowingly. Every earlier config is kept under `config-history/`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from agenttrain.run.checkpoint import CheckpointError, checkpoints_dir

CONFIG_FILE = "config.yaml"
HISTORY_DIR = "config-history"

MAY_CHANGE_ON_RESUME = (
    "run.out_dir",
    "trainer.total_steps",
    "trainer.save_freq",
    "trainer.test_freq",
    "trainer.eval_freq",
    "trainer.keep_checkpoints",
    "trainer.loggers",
    "trainer.resume",
    "trainer.save_trajectories",
    "env.servers",
    "env.token",
    "rollout.env_timeout_s",
)
"""Keys a resumed run may change without `--allow-config-change`: where the run folder is (a
moved or copied run continues from its own checkpoints), how long to train, how often to save,
validate and log, and where the environment servers are. Nothing that changes what a step
computes."""


class ConfigChanged(CheckpointError):
    """A run would resume with settings other than those it was trained with."""


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested sections as dotted keys: {"trainer": {"save_freq": 5}} -> {"trainer.save_freq": 5}."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}.{key}" if prefix else key
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, name))
        else:
            flat[name] = value
    return flat


def config_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Keys whose values differ, as (old, new). A key present on one side only comes from
    another agenttrain version, not from the user, and is not a change."""
    before, after = flatten(old), flatten(new)
    return {
        key: (before[key], after[key])
        for key in before.keys() & after.keys()
        if before[key] != after[key]
    }


def with_defaults(stored: dict[str, Any], schema: type[BaseModel]) -> dict[str, Any]:
    """`stored` with this version's defaults for the keys it lacks; as it is when this version
    cannot read it (a key since removed): its keys are still compared one by one."""
    try:
        return schema.model_validate(stored).model_dump(mode="json")
    except ValidationError:
        return stored


def stored_config(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / CONFIG_FILE
    return yaml.safe_load(path.read_text()) if path.exists() else None


def check_resume_config(
    run_dir: Path,
    config: Mapping[str, Any],
    allow_change: bool,
    schema: type[BaseModel] | None = None,
) -> dict[str, tuple[Any, Any]]:
    """The changes from the run folder's stored config; raises ConfigChanged when a key outside
    `MAY_CHANGE_ON_RESUME` changed and `allow_change` is off. With the config's `schema` the
    stored config is read through it: a key an older version did not write ran at what is now
    its default, so setting it to anything else on resume is a change too."""
    stored = stored_config(run_dir)
    if stored is None:
        return {}
    if schema is not None:
        stored = with_defaults(stored, schema)
    changes = config_changes(stored, config)
    refused = sorted(key for key in changes if key not in MAY_CHANGE_ON_RESUME)
    if refused and not allow_change:
        listed = "; ".join(f"{key}: {changes[key][0]!r} -> {changes[key][1]!r}" for key in refused)
        raise ConfigChanged(
            f"{run_dir} was trained with another config ({listed}). Resume with "
            f"{run_dir / CONFIG_FILE}, choose another run.out_dir, or pass "
            "--allow-config-change to continue with the new settings (the old config is kept "
            f"in {run_dir / HISTORY_DIR})"
        )
    return changes


def check_config_location(config_path: Path, out_dir: Path, out_dir_given: bool) -> None:
    """Refuses a run folder's own config.yaml whose run.out_dir names another folder, unless
    run.out_dir was given: in a copied or moved run folder the file still names the original,
    and training with it as it is would continue (and change) the original run."""
    folder = config_path.parent
    if out_dir_given or config_path.name != CONFIG_FILE or not checkpoints_dir(folder).is_dir():
        return
    if folder.resolve() == out_dir.resolve():
        return
    raise ConfigChanged(
        f"{config_path} is the config of the run folder {folder}, but its run.out_dir is "
        f"{out_dir}: as it is, it would continue {out_dir}. Add run.out_dir={folder} to "
        f"continue {folder}, or run.out_dir={out_dir} to continue {out_dir}"
    )


def describe_changes(changes: Mapping[str, tuple[Any, Any]]) -> str:
    return ", ".join(f"{key} {old!r} -> {new!r}" for key, (old, new) in sorted(changes.items()))


def record_config(run_dir: Path, text: str, step: int) -> Path | None:
    """Write the run's config; a different earlier one is kept as config-history/
    config-step-<step>.yaml (the step it was used up to). Returns that file, if any."""
    path = run_dir / CONFIG_FILE
    kept = None
    if path.exists() and path.read_text() != text:
        history = run_dir / HISTORY_DIR
        history.mkdir(exist_ok=True)
        kept = history / f"config-step-{step}.yaml"
        kept.write_text(path.read_text())
    path.write_text(text)
    return kept
