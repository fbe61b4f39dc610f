"""The econ oracle: it reads the household's state from the latest observation and answers the
grid search's best decision (`model.best_decision`), month after month."""

from __future__ import annotations

import json
from collections.abc import Sequence

from agenttrain.envs.actions import Oracle, PlannedAction
from agenttrain.envs.econ.model import Household, best_decision

TASK_MARKER = "Household state at the start of month"
STATE_FIELDS = {
    "savings": ("savings", 1.0),
    "hourly wage": ("wage", 1.0),
    "last income": ("last_income", 1.0),
    "price level": ("price", 1.0),
    "inflation (monthly)": ("inflation", 0.01),
    "interest on savings (monthly)": ("interest", 0.01),
    "income tax rate": ("tax_rate", 0.01),
    "monthly transfer": ("transfer", 1.0),
}
"""Observation line -> the state's field and the factor from the shown number (% -> share)."""


def read_state(observation: str) -> Household:
    """The state an observation shows (the part of it that the decision depends on)."""
    values: dict[str, float] = {}
    for line in observation.split(TASK_MARKER, 1)[-1].splitlines():
        name, _, shown = line.removeprefix("- ").partition(": ")
        if name in STATE_FIELDS and shown:
            field, factor = STATE_FIELDS[name]
            values[field] = float(shown.rstrip("%")) * factor
    missing = sorted({field for field, _ in STATE_FIELDS.values()} - set(values))
    if missing:
        raise ValueError(f"econ oracle: the observation does not show {', '.join(missing)}")
    return Household(month=1, **values)


def decide(observations: Sequence[str]) -> PlannedAction:
    """The best decision for the latest state shown."""
    best = best_decision(read_state(observations[-1]))
    action = json.dumps({"work": best.work, "consumption": best.consumption})
    return PlannedAction("The grid search's best decision for this month's state.", action)


def plan(observation: str) -> list[PlannedAction]:
    return [decide([observation])]


ORACLE = Oracle(task_marker=TASK_MARKER, plan=plan, follow=decide)
