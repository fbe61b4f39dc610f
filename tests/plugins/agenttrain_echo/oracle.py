"""The Echo oracle: it reads the words from the first observation and repeats them."""

from __future__ import annotations

from agenttrain.envs import Oracle, PlannedAction

TASK_MARKER = "Repeat exactly:"


def plan(observation: str) -> list[PlannedAction]:
    words = observation.split(TASK_MARKER, 1)[1].strip()
    return [PlannedAction("I repeat the words shown.", words)]


ORACLE = Oracle(task_marker=TASK_MARKER, plan=plan)
