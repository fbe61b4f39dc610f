"""BIRD as AgentGym's SQLGym server reads it, with AgentGym's task ids and splits.

Layout (what AgentGym's setup.sh unpacks): `<root>/<part>/<part>.json` (questions: `db_id`,
`question`, `SQL`), `<root>/<part>/<part>_tables.json` (schemas) and
`<root>/<part>/<part>_databases/<db_id>/<db_id>.sqlite`, for the parts `train` and `dev`.
Task ids follow AgentGym's `ITEM_RANGE`: 0-9427 are train questions 0-9427, 9428-10961 are
dev questions 0-1533; the splits are `train` and `test` (dev). Databases open read-only.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import Any

from agenttrain.envs.base import EnvError
from agenttrain.envs.sqlgym.schema import Schema, describe_schema, observation
from agenttrain.envs.sqlgym.tasks import BIRD_DIR_VARIABLE, SqlTask

PARTS = {"train": range(0, 9428), "dev": range(9428, 10962)}
"""AgentGym's task ids of each BIRD part."""

SPLIT_OF_PART = {"train": "train", "dev": "test"}


class BirdLayoutError(EnvError):
    """The BIRD folder is missing, or lacks files AgentGym's layout has."""


def required_files(root: Path) -> list[Path]:
    return [
        path
        for part in PARTS
        for path in (
            root / part / f"{part}.json",
            root / part / f"{part}_tables.json",
            root / part / f"{part}_databases",
        )
    ]


def check_layout(root: Path) -> None:
    """Refuse a folder that is not BIRD as AgentGym lays it out, naming what is missing."""
    if not root.is_dir():
        raise BirdLayoutError(
            f"BIRD folder {root} does not exist (set {BIRD_DIR_VARIABLE} to the folder that "
            "holds train/ and dev/ as AgentGym's agentenv-sqlgym/setup.sh unpacks them, or "
            f"unset it to use the bundled databases)"
        )
    missing = [str(path.relative_to(root)) for path in required_files(root) if not path.exists()]
    if missing:
        raise BirdLayoutError(
            f"BIRD folder {root} lacks {', '.join(missing)} (expected AgentGym's layout: "
            "<part>/<part>.json, <part>/<part>_tables.json and <part>/<part>_databases/"
            "<db_id>/<db_id>.sqlite for train and dev)"
        )


@dataclass(frozen=True)
class BirdPart:
    root: Path
    name: str

    @cached_property
    def questions(self) -> list[dict[str, Any]]:
        return _read_json(self.root / self.name / f"{self.name}.json")

    @cached_property
    def schema_texts(self) -> dict[str, str]:
        entries = _read_json(self.root / self.name / f"{self.name}_tables.json")
        return {
            entry["db_id"]: describe_schema(Schema.from_bird(entry), agentgym_foreign_keys=True)
            for entry in entries
        }

    def database(self, db_id: str) -> Path:
        return self.root / self.name / f"{self.name}_databases" / db_id / f"{db_id}.sqlite"

    def task(self, task_id: int, index: int) -> SqlTask:
        if index >= len(self.questions):
            raise BirdLayoutError(
                f"task {task_id} is {self.name} question {index}, but "
                f"{self.root / self.name / f'{self.name}.json'} has {len(self.questions)}"
            )
        item = self.questions[index]
        db_id = item["db_id"]
        if db_id not in self.schema_texts:
            raise BirdLayoutError(f"{self.name}_tables.json in {self.root} has no schema {db_id}")
        text = observation(self.schema_texts[db_id], item["question"])
        return SqlTask(task_id, db_id, item["question"], item["SQL"], text)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as problem:
        raise BirdLayoutError(f"cannot read {path}: {problem}") from problem


class BirdTasks:
    """The tasks of one BIRD folder (checked when first used)."""

    name = "bird"
    blocking = True

    def __init__(self, root: Path) -> None:
        check_layout(root)
        self.root = root
        self.parts = {name: BirdPart(root, name) for name in PARTS}

    def splits(self) -> Mapping[str, range]:
        """AgentGym's ranges, cut to the questions the folder has."""
        return {
            SPLIT_OF_PART[name]: ids[: len(self.parts[name].questions)]
            for name, ids in PARTS.items()
        }

    def task(self, task_id: int) -> SqlTask:
        for name, ids in PARTS.items():
            if task_id in ids:
                return self.parts[name].task(task_id, task_id - ids.start)
        raise BirdLayoutError(
            f"SQLGym task {task_id} is out of range: AgentGym's BIRD ids are 0-10961 "
            "(train 0-9427, dev 9428-10961)"
        )

    def connect(self, task: SqlTask) -> sqlite3.Connection:
        part = self.parts["train" if task.task_id in PARTS["train"] else "dev"]
        path = part.database(task.db_id)
        if not path.is_file():
            raise BirdLayoutError(f"BIRD database {path} is missing")
        return sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, check_same_thread=False)

    def gold_for(self, db_id: str, question: str) -> str | None:
        return self._gold.get((db_id, question))

    @cached_property
    def _gold(self) -> dict[tuple[str, str], str]:
        return {
            (item["db_id"], item["question"]): item["SQL"]
            for part in self.parts.values()
            for item in part.questions
        }


@cache
def bird_tasks(folder: str) -> BirdTasks:
    return BirdTasks(Path(folder).expanduser().resolve())
