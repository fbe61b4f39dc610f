"""What a SQLGym task is, and where tasks come from: a BIRD folder or the bundled set.

`AGENTTRAIN_BIRD_DIR` (or the environment's `bird_dir` argument) names a folder laid out as
AgentGym's setup.sh leaves BIRD; without it the bundled databases are used, so text-to-SQL
runs on any machine. Both give the same kind of task: a question on one SQLite database, its
observation and its gold SQL.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

BIRD_DIR_VARIABLE = "AGENTTRAIN_BIRD_DIR"


@dataclass(frozen=True)
class SqlTask:
    task_id: int
    db_id: str
    question: str
    gold_sql: str
    observation: str
    """Schema text, a blank line, the question (what AgentGym's `/reset` answers)."""


class TaskSet(Protocol):
    """A source of SQLGym tasks and of read-only connections to their databases."""

    name: str
    blocking: bool
    """True when queries can take long (large databases): run them off the event loop."""

    def splits(self) -> Mapping[str, Sequence[int]]: ...

    def task(self, task_id: int) -> SqlTask: ...

    def connect(self, task: SqlTask) -> sqlite3.Connection:
        """A connection to the task's database that cannot change it."""
        ...

    def gold_for(self, db_id: str, question: str) -> str | None:
        """The gold SQL of the task asking `question` on `db_id` (the oracle's lookup)."""
        ...


def configured_bird_dir(bird_dir: str | os.PathLike[str] | None = None) -> str | None:
    """The BIRD folder to use: the argument, else `AGENTTRAIN_BIRD_DIR`, else None (bundled)."""
    chosen = bird_dir if bird_dir is not None else os.environ.get(BIRD_DIR_VARIABLE)
    return os.fspath(chosen) if chosen else None
