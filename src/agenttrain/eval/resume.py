"""An evaluation keeps what it finished: episodes are appended as they end, and running the
same command again plays only the missing ones.

Each model's folder records the settings it is evaluated with (`settings.json`); a run into
a folder holding another evaluation of that model (other tasks, samples, temperature, ...)
is refused unless asked to replace it, so one summary never mixes two evaluations. Asking
for more of the same evaluation is not another one: more samples, seeds or tasks keep the
episodes played (each episode's sampling seed depends on its task, seed and sample only).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from agenttrain.rollout.trajectory import Trajectory, write_jsonl
from agenttrain.run.history import config_changes, describe_changes

SETTINGS_FILE = "settings.json"
EPISODES_FILE = "episodes.jsonl"
PARTIAL_FILE = "episodes.partial.jsonl"

EpisodeKey = tuple[int, int, int]

GROWABLE = ("n", "seeds", "tasks")
"""Settings that may grow between runs into one folder: the episodes asked for before are
among those asked for now, played the same way."""


class EvalSettingsChanged(ValueError):
    """The output folder holds an evaluation of this model with other settings."""


def episode_key(task_id: int, seed: int, sample: int) -> EpisodeKey:
    return (task_id, seed, sample)


class ModelFolder:
    """One model's evaluation folder: its settings, and its episodes as they end."""

    def __init__(self, folder: Path, settings: Mapping[str, Any], replace: bool = False) -> None:
        self.folder = folder
        self.settings = json.loads(json.dumps(dict(settings), default=str))
        self.episodes_path = folder / EPISODES_FILE
        self.partial_path = folder / PARTIAL_FILE
        self._check(replace)

    def _check(self, replace: bool) -> None:
        recorded_file = self.folder / SETTINGS_FILE
        holds = self.episodes_path.exists() or self.partial_path.exists()
        if replace and self.folder.exists():
            shutil.rmtree(self.folder)
        elif recorded_file.exists():
            changes = config_changes(json.loads(recorded_file.read_text()), self.settings)
            if changes and not only_grown(changes):
                raise EvalSettingsChanged(
                    f"{self.folder} holds an evaluation of this model with other settings "
                    f"({describe_changes(changes)}); choose another --out, or pass --replace "
                    "to discard it"
                )
        elif holds:
            raise EvalSettingsChanged(
                f"{self.folder} holds an evaluation with no record of its settings; choose "
                "another --out, or pass --replace to discard it"
            )
        self.folder.mkdir(parents=True, exist_ok=True)
        recorded_file.write_text(json.dumps(self.settings, indent=2) + "\n")

    def finished(self) -> dict[EpisodeKey, Trajectory]:
        """Episodes already played (a completed evaluation, or a stopped one's partial file)."""
        found: dict[EpisodeKey, Trajectory] = {}
        for path in (self.episodes_path, self.partial_path):
            if path.exists():
                for trajectory in _readable(path):
                    found[_key(trajectory)] = trajectory
        return found

    def append(self, trajectory: Trajectory) -> None:
        """Keep one finished episode at once (a stop after it loses nothing)."""
        write_jsonl(self.partial_path, [trajectory], append=True)

    def complete(self, trajectories: Iterable[Trajectory]) -> Path:
        """Write the whole evaluation in request order; the partial file is then dropped."""
        staging = self.folder / (EPISODES_FILE + ".tmp")
        write_jsonl(staging, trajectories)
        staging.replace(self.episodes_path)
        self.partial_path.unlink(missing_ok=True)
        return self.episodes_path


def only_grown(changes: Mapping[str, tuple[Any, Any]]) -> bool:
    """Whether `changes` (old, new) only ask for more episodes: more samples per task, or
    seeds and tasks that include the old ones."""
    return all(_grows(key, old, new) for key, (old, new) in changes.items())


def _grows(key: str, old: Any, new: Any) -> bool:
    if key == "n":
        return isinstance(old, int) and isinstance(new, int) and new > old
    lists = isinstance(old, list) and isinstance(new, list)
    return key in GROWABLE and lists and set(old) <= set(new)


def _key(trajectory: Trajectory) -> EpisodeKey:
    return episode_key(trajectory.task_id, trajectory.seed, trajectory.sample)


def _readable(path: Path) -> Iterable[Trajectory]:
    """The trajectories of a file; a last line cut by a kill mid-write is skipped."""
    lines = path.read_text().splitlines()
    for number, line in enumerate(lines):
        try:
            yield Trajectory.from_dict(json.loads(line))
        except (ValueError, TypeError):
            if number != len(lines) - 1:
                raise ValueError(f"{path}:{number + 1}: not a trajectory") from None
