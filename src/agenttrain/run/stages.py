"""What each finished stage of a multi-stage run (a recipe) ran with, so a rerun cannot reuse
a stage whose settings changed and report the new settings for old results.

Each stage's record holds its own resolved settings and, nested, the record of the stage it
started from: a changed SFT stage therefore also shows up as a change of every stage after it
("sft.optim.lr" in the GRPO stage's record), even when only the SFT folder was removed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agenttrain.atomic import write_text_atomically
from agenttrain.run.history import config_changes, describe_changes

RECORD_FILE = "stages.json"
TIMES_FILE = "stage_times.json"


class StageChanged(ValueError):
    """A finished stage ran with other settings than the ones asked for now."""


class StageRecords:
    """`<run>/stages.json`: stage name -> the settings it finished with."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / RECORD_FILE
        self.records: dict[str, Any] = (
            json.loads(self.path.read_text()) if self.path.exists() else {}
        )

    def get(self, stage: str) -> dict[str, Any] | None:
        return self.records.get(stage)

    def check(
        self, stage: str, settings: Mapping[str, Any], folder: Path, later: Sequence[Path] = ()
    ) -> bool:
        """Before reusing a finished stage: refuse when it ran with other settings. False when
        the stage has no record (a folder from before records were kept): reused as it is."""
        found = self.differences(stage, settings)
        if found is None:
            return False
        changes, added = found
        if changes or added:
            listed = describe_changes(changes) or ""
            if added:
                listed = ", ".join(filter(None, [listed, f"new: {', '.join(sorted(added))}"]))
            remove = " and ".join(str(p) for p in (folder, *later))
            raise StageChanged(
                f"{folder} ran with other settings ({listed}). Remove {remove} to run "
                "again with the new settings, or choose another run.out_dir"
            )
        return True

    def differences(
        self, stage: str, settings: Mapping[str, Any]
    ) -> tuple[dict[str, tuple[Any, Any]], set[str]] | None:
        """How `settings` differ from the stage's record: changed keys as (recorded, asked),
        and keys the record lacks. None when the stage has no record."""
        recorded = self.records.get(stage)
        if recorded is None:
            return None
        settings = json.loads(json.dumps(dict(settings), default=str))
        return config_changes(recorded, settings), _keys(settings) - _keys(recorded)

    def record(self, stage: str, settings: Mapping[str, Any]) -> None:
        """Record a stage that just finished (written at once, atomically)."""
        self.records[stage] = json.loads(json.dumps(dict(settings), default=str))
        write_text_atomically(self.path, json.dumps(self.records, indent=2) + "\n")


class StageTimes:
    """`<run>/stage_times.json`: stage name -> wall seconds spent on it, summed over every
    invocation that worked on it. A continued or rerun recipe then reports what its stages
    cost, not the ~0 s of reusing them; an interrupted stage's time counts too."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / TIMES_FILE
        self.seconds: dict[str, float] = (
            json.loads(self.path.read_text()) if self.path.exists() else {}
        )

    def add(self, stage: str, seconds: float) -> float:
        """Count `seconds` more for `stage` (written at once, atomically); its new total."""
        self.seconds[stage] = self.seconds.get(stage, 0.0) + seconds
        write_text_atomically(self.path, json.dumps(self.seconds, indent=2) + "\n")
        return self.seconds[stage]


def without_unrecorded_defaults(
    settings: dict[str, Any], recorded: Mapping[str, Any] | None, defaults: Mapping[str, Any]
) -> dict[str, Any]:
    """`settings` less each dotted key of `defaults` that is at its default value and that
    `recorded` lacks: a stage recorded before the setting existed ran as its default says,
    so a rerun may reuse it (a new key is otherwise a change). In place; returned."""
    for dotted, default in defaults.items():
        *parents, key = dotted.split(".")
        holder, old = settings, recorded or {}
        for name in parents:
            holder, old = holder.get(name, {}), old.get(name, {})
        if key in holder and holder[key] == default and key not in old:
            del holder[key]
    return settings


def _keys(data: Mapping[str, Any], prefix: str = "") -> set[str]:
    keys = set()
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            keys |= _keys(value, f"{name}.")
        else:
            keys.add(name)
    return keys
