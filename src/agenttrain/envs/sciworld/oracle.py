"""SciWorld's oracle: ScienceWorld's gold action sequence for the game being played.

Like every oracle it reads the task from the first observation, so it plays through a
remote server as well: `first_observations.txt` holds a digest of each game's first
observation (task description + "look around"), in data_idx order, built once from
scienceworld 1.2.3 by `build_index`. Most first observations are unique; a
digest shared by several games (same room and wording, e.g. test-conductivity variations
that differ only in the hidden answer) resolves to the lowest data_idx, whose gold
sequence may not solve the others.
"""

from __future__ import annotations

import hashlib
import threading
from functools import cache
from importlib import resources

from agenttrain.envs.actions import Oracle, PlannedAction
from agenttrain.envs.sciworld.games import Game, game, games
from agenttrain.envs.sciworld.jvm import simulators

TASK_MARKER = "Your task is to"
"""Every ScienceWorld task description starts so; only a first observation contains it."""

_gold_lock = threading.Lock()


def digest(first_observation: str) -> str:
    """The index key of a first observation: the task description on, its lines sorted.
    ScienceWorld lists a room's objects in an order that depends on what its JVM did before
    (a global object counter), so only the set of lines identifies a game."""
    start = first_observation.find(TASK_MARKER)
    text = first_observation[start:] if start >= 0 else first_observation
    return hashlib.sha256("\n".join(sorted(text.splitlines())).encode()).hexdigest()[:12]


@cache
def _index() -> dict[str, int]:
    data = resources.files("agenttrain.envs.sciworld").joinpath("first_observations.txt")
    index: dict[str, int] = {}
    for data_idx, key in enumerate(data.read_text().split()):
        index.setdefault(key, data_idx)
    return index


def identify(first_observation: str) -> Game | None:
    """The game whose first observation this is (the lowest data_idx when several share it)."""
    data_idx = _index().get(digest(first_observation))
    return None if data_idx is None else game(data_idx)


def describe(first_observation: str) -> dict[str, object]:
    """Category, task and variation of a first observation (empty when unknown)."""
    found = identify(first_observation)
    if found is None:
        return {}
    task = found.task
    return {"category": task.category, "task_name": task.name, "var_num": found.variation}


@cache
def gold_actions(data_idx: int) -> tuple[str, ...]:
    """ScienceWorld's gold action sequence for game `data_idx` (needs Java)."""
    chosen = game(data_idx)
    with _gold_lock:
        factory = simulators()
        simulator = factory.new()
        try:
            simulator.load(chosen.task.name, chosen.variation, "", True)
            return tuple(simulator.getGoldActionSequence())
        finally:
            factory.release(simulator)


def plan(first_observation: str) -> list[PlannedAction]:
    found = identify(first_observation)
    if found is None:
        raise ValueError("not the first observation of a SciWorld game (no known task)")
    actions = gold_actions(found.data_idx)
    return [
        PlannedAction(f"Step {n} of {len(actions)} of a known solution: {action}.", action)
        for n, action in enumerate(actions, 1)
    ]


ORACLE = Oracle(task_marker=TASK_MARKER, plan=plan)


def build_index() -> list[str]:
    """Digests of every game's first observation, in data_idx order (about 100 s here)."""
    factory = simulators()
    simulator = factory.new()
    try:
        keys = []
        for g in games():
            simulator.load(g.task.name, g.variation, "", False)
            description = simulator.getTaskDescription()
            keys.append(digest(f"{description}\n{simulator.step('look around')}"))
        return keys
    finally:
        factory.release(simulator)
