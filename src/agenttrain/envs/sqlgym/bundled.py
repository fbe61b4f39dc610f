"""The bundled task set: the generated questions over the generated databases.

Task `i` is question `i` of `questions()`. Splits are fixed by a hash of each question's
database and text (20% test, 10% val, the rest train), so they are the same on every
machine and a question keeps its split if others are added. Each reset builds its database
afresh in memory (a few hundred rows, well under a millisecond of work per table) and makes
the connection read-only, so an answer cannot change what the next one sees.
"""

from __future__ import annotations

import hashlib
import sqlite3
from functools import cache, cached_property

from agenttrain.envs.base import EnvError
from agenttrain.envs.sqlgym.databases import databases
from agenttrain.envs.sqlgym.questions import Question, questions
from agenttrain.envs.sqlgym.schema import describe_schema, observation
from agenttrain.envs.sqlgym.tasks import SqlTask

TEST_PERCENT = 20
VAL_PERCENT = 10


class UnknownTask(EnvError):
    """A task id the bundled set does not have."""


def split_of(question: Question) -> str:
    """`test`, `val` or `train`, from a stable hash of the question."""
    digest = hashlib.blake2b(f"{question.db_id}\x00{question.text}".encode(), digest_size=8)
    bucket = int.from_bytes(digest.digest(), "big") % 100
    if bucket < TEST_PERCENT:
        return "test"
    return "val" if bucket < TEST_PERCENT + VAL_PERCENT else "train"


class BundledTasks:
    """The questions over the five bundled databases."""

    name = "bundled"
    blocking = False

    @cached_property
    def tasks(self) -> tuple[SqlTask, ...]:
        schema_texts = {db_id: describe_schema(db.schema()) for db_id, db in databases().items()}
        return tuple(
            SqlTask(i, q.db_id, q.text, q.sql, observation(schema_texts[q.db_id], q.text))
            for i, q in enumerate(questions())
        )

    def splits(self) -> dict[str, tuple[int, ...]]:
        ids: dict[str, list[int]] = {"train": [], "val": [], "test": []}
        for task_id, question in enumerate(questions()):
            ids[split_of(question)].append(task_id)
        return {name: tuple(members) for name, members in ids.items()}

    def task(self, task_id: int) -> SqlTask:
        if not 0 <= task_id < len(self.tasks):
            raise UnknownTask(
                f"the bundled SQLGym set has tasks 0-{len(self.tasks) - 1}, not {task_id}"
            )
        return self.tasks[task_id]

    def connect(self, task: SqlTask) -> sqlite3.Connection:
        connection = sqlite3.connect(":memory:", check_same_thread=False)
        databases()[task.db_id].create_in(connection)
        connection.execute("PRAGMA query_only = ON")
        return connection

    def gold_for(self, db_id: str, question: str) -> str | None:
        return self._gold.get((db_id, question))

    @cached_property
    def _gold(self) -> dict[tuple[str, str], str]:
        return {(task.db_id, task.question): task.gold_sql for task in self.tasks}


@cache
def bundled_tasks() -> BundledTasks:
    return BundledTasks()
