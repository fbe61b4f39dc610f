"""SciWorld's games: AgentGym's 4,639 (task, variation) pairs, in its order, and the splits.

AgentGym numbers every variation of ScienceWorld's 30 tasks in task order, leaving out the
seven tasks in `EXCLUDED` (reference agentgym.md section 1.3; counts verified against
scienceworld 1.2.3, whose variation counts changed across releases, hence the pin).
ScienceWorld splits each task's variations into train, dev and test ranges (train first,
then dev, then test); the splits here keep that division, so no test variation is ever
trained on.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

EXCLUDED = ("5-1", "5-2", "9-1", "9-2", "9-3", "10-1", "10-2")
"""Tasks AgentGym leaves out (grow a plant/fruit, inclined planes, friction, genetics)."""


@dataclass(frozen=True)
class Task:
    task_id: str
    """ScienceWorld's number, e.g. "1-1"."""
    name: str
    category: str
    variations: int
    train: int
    """Variations 0..train-1 are ScienceWorld's train variations."""
    dev: int
    """The next `dev` are its dev variations; the rest are test variations."""


TASKS = (
    Task("1-1", "boil", "Matter", 30, 14, 7),
    Task("1-2", "melt", "Matter", 30, 14, 7),
    Task("1-3", "freeze", "Matter", 30, 14, 7),
    Task("1-4", "change-the-state-of-matter-of", "Matter", 30, 14, 7),
    Task("2-1", "use-thermometer", "Measure", 540, 270, 135),
    Task("2-2", "measure-melting-point-known-substance", "Measure", 436, 218, 109),
    Task("2-3", "measure-melting-point-unknown-substance", "Measure", 300, 150, 75),
    Task("3-1", "power-component", "Electricity", 20, 10, 5),
    Task("3-2", "power-component-renewable-vs-nonrenewable-energy", "Electricity", 20, 10, 5),
    Task("3-3", "test-conductivity", "Test-Cond", 900, 450, 225),
    Task("3-4", "test-conductivity-of-unknown-substances", "Test-Cond", 600, 300, 150),
    Task("4-1", "find-living-thing", "Find", 300, 150, 75),
    Task("4-2", "find-non-living-thing", "Find", 300, 150, 75),
    Task("4-3", "find-plant", "Find", 300, 150, 75),
    Task("4-4", "find-animal", "Find", 300, 150, 75),
    Task("6-1", "chemistry-mix", "Chem-Mix", 32, 16, 8),
    Task("6-2", "chemistry-mix-paint-secondary-color", "Chem-Mix", 36, 18, 9),
    Task("6-3", "chemistry-mix-paint-tertiary-color", "Chem-Mix", 36, 18, 9),
    Task("7-1", "lifespan-longest-lived", "Lifespan", 125, 62, 31),
    Task("7-2", "lifespan-shortest-lived", "Lifespan", 125, 62, 31),
    Task("7-3", "lifespan-longest-lived-then-shortest-lived", "Lifespan", 125, 62, 31),
    Task("8-1", "identify-life-stages-1", "Life-Stages", 14, 6, 3),
    Task("8-2", "identify-life-stages-2", "Life-Stages", 10, 4, 2),
)
"""Categories: AgentGym's reporting groups (its test set draws from five of them)."""

TEST_MIX = {"Measure": 53, "Test-Cond": 83, "Find": 44, "Chem-Mix": 5, "Lifespan": 15}
"""AgentGym's 200 SciWorld test games per category (paper Table 5 denominators)."""


@dataclass(frozen=True)
class Game:
    data_idx: int
    task: Task
    variation: int

    @property
    def split(self) -> str:
        if self.variation < self.task.train:
            return "train"
        return "dev" if self.variation < self.task.train + self.task.dev else "test"


@cache
def games() -> tuple[Game, ...]:
    """All 4,639 games; `games()[data_idx]` is AgentGym's game `data_idx`."""
    listed = [(task, v) for task in TASKS for v in range(task.variations)]
    return tuple(Game(i, task, v) for i, (task, v) in enumerate(listed))


def game(data_idx: int) -> Game:
    every = games()
    if not 0 <= data_idx < len(every):
        raise IndexError(f"SciWorld has games 0-{len(every) - 1}, not {data_idx}")
    return every[data_idx]


def _evenly_spaced(ids: list[int], k: int) -> list[int]:
    return [ids[(2 * i + 1) * len(ids) // (2 * k)] for i in range(k)]


@cache
def splits() -> dict[str, tuple[int, ...]]:
    """`train`: ScienceWorld's train variations of every task (2,312 games); `val`: its dev
    variations (1,156); `test`: 200 of its test variations with AgentGym's category mix,
    shared evenly between a category's tasks and spread evenly over each task's range."""
    by_split: dict[str, list[int]] = {"train": [], "dev": [], "test": []}
    for g in games():
        by_split[g.split].append(g.data_idx)
    test: list[int] = []
    for category, count in TEST_MIX.items():
        tasks = [t for t in TASKS if t.category == category]
        for n, task in enumerate(tasks):
            share = count // len(tasks) + (n < count % len(tasks))
            ids = [g.data_idx for g in games() if g.task is task and g.split == "test"]
            test += _evenly_spaced(ids, share)
    return {"train": tuple(by_split["train"]), "val": tuple(by_split["dev"]), "test": tuple(test)}
