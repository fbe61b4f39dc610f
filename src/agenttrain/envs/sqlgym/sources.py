"""Which task set a SQLGym instance uses: a BIRD folder, or the bundled databases.

Apart from `tasks` (what a task is), which both task sets import: the choice between them
there made an import circle.
"""

from __future__ import annotations

from agenttrain.envs.sqlgym.bird import bird_tasks
from agenttrain.envs.sqlgym.bundled import bundled_tasks
from agenttrain.envs.sqlgym.tasks import TaskSet


def task_set(folder: str | None) -> TaskSet:
    """The tasks of the BIRD folder `folder`, or the bundled set for None (both cached)."""
    return bird_tasks(folder) if folder else bundled_tasks()
