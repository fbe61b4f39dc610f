"""The Largest Number oracle: it reads the numbers from the question and names the largest."""

from __future__ import annotations

import re

from agenttrain.envs.actions import Oracle, PlannedAction

TASK_MARKER = "Which number is the largest:"


def plan(observation: str) -> list[PlannedAction]:
    """The one-step plan for the question `observation`."""
    listed = [int(n) for n in re.findall(r"\d+", observation.split(TASK_MARKER, 1)[-1])]
    if not listed:
        raise ValueError(f"no numbers in the question: {observation!r}")
    best = max(listed)
    return [PlannedAction(f"The largest of {', '.join(map(str, listed))} is {best}.", str(best))]


ORACLE = Oracle(task_marker=TASK_MARKER, plan=plan)
