"""The SQLGym oracle: it finds the task by its database and question and answers the gold SQL.

The first observation names the database ("<db> contains tables such as ...") and ends with
the question, so the oracle needs no side channel and plays through an AgentGym server too,
as long as it reads the same tasks (the bundled set, or the same BIRD folder).
"""

from __future__ import annotations

import re

from agenttrain.envs.actions import Oracle, PlannedAction
from agenttrain.envs.sqlgym.sources import task_set

TASK_MARKER = " contains tables such as "
DATABASE = re.compile(r"(\S+) contains tables such as ")


def database_and_question(observation: str) -> tuple[str, str]:
    """The database name and the question of a first observation."""
    found = DATABASE.search(observation)
    if found is None or "\n\n" not in observation[found.end() :]:
        raise ValueError(f"not a SQLGym task observation: {observation[:200]!r}")
    return found.group(1), observation[found.end() :].split("\n\n", 1)[1].strip()


def oracle_for(folder: str | None) -> Oracle:
    """The oracle over the tasks of BIRD folder `folder`, or of the bundled set (None)."""

    def plan(observation: str) -> list[PlannedAction]:
        db_id, question = database_and_question(observation)
        gold = task_set(folder).gold_for(db_id, question)
        if gold is None:
            raise ValueError(f"no task asks {question!r} on database {db_id!r}")
        thought = f"The gold query of database {db_id} answers this question."
        return [PlannedAction(thought, f"```sql\n{gold}\n```")]

    return Oracle(task_marker=TASK_MARKER, plan=plan)
