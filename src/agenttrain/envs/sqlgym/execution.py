"""Running a SQL answer and scoring it by execution match, as AgentGym's SQLGym does.

AgentGym (`sqlgym==0.1.2`) executes the predicted query, then the gold one, on the task's
database; the reward is 1 when the two return the same *set* of rows (order and duplicates
ignored), 0 otherwise or when the predicted query fails. The observation is `str()` of the
rows, or the error's message, cut to 100 characters plus "...".

Two changes: a query that runs past `step_limit` SQLite steps is stopped and reported as
the error "interrupted" (AgentGym's server would hang on it), and a gold query that fails is
an environment error, never a reward of 0.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from agenttrain.envs.base import EnvError

RESULT_CHARS = 100
"""AgentGym's server shows at most this many characters of a result."""

STEP_LIMIT = 200_000_000
"""Default budget of SQLite virtual-machine steps per predicted query (seconds of work)."""

_CHECK_EVERY = 10_000
"""How many SQLite steps pass between two looks at the budget."""

SQL_ERRORS = (sqlite3.Error, sqlite3.Warning, ValueError)
"""What a bad query raises: SQLite's errors, "one statement at a time", a NUL character."""


class GoldQueryFailed(EnvError):
    """The task's own gold SQL does not run: the task is broken, not the answer."""


@dataclass(frozen=True)
class Execution:
    """A predicted query's outcome: its rows, or the error it raised."""

    rows: list[tuple[object, ...]] | None
    error: str | None = None

    @property
    def text(self) -> str:
        """The observation AgentGym's server answers with."""
        shown = self.error if self.error is not None else str(self.rows)
        return shown[:RESULT_CHARS] + "..." if len(shown) > RESULT_CHARS else shown


def execute(connection: sqlite3.Connection, sql: str, step_limit: int = STEP_LIMIT) -> Execution:
    """Run one statement, stopping it after `step_limit` SQLite steps."""
    checks = iter(range(step_limit // _CHECK_EVERY))
    connection.set_progress_handler(lambda: next(checks, None) is None, _CHECK_EVERY)
    try:
        return Execution(connection.execute(sql).fetchall())
    except SQL_ERRORS as failure:
        return Execution(None, str(failure))
    finally:
        connection.set_progress_handler(None, 0)


def gold_rows(connection: sqlite3.Connection, gold_sql: str) -> list[tuple[object, ...]]:
    """The gold query's rows; a failure is the task's fault, raised as `GoldQueryFailed`."""
    try:
        return connection.execute(gold_sql).fetchall()
    except SQL_ERRORS as failure:
        raise GoldQueryFailed(f"the gold SQL fails ({failure}): {gold_sql}") from failure


def execution_match(predicted: Execution, gold: list[tuple[object, ...]]) -> float:
    """1.0 when the predicted rows equal the gold rows as sets, else 0.0 (AgentGym's rule)."""
    if predicted.rows is None:
        return 0.0
    return 1.0 if set(predicted.rows) == set(gold) else 0.0
