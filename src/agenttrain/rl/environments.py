"""The environments of a training run (one, or several mixed by weight) and its task stream.

A run over several environments (`envs: [textcraft, babyai]`, AgentEvol-style) draws its
tasks in rounds: each round holds `weight` tasks of every environment, interleaved, and each
environment walks through per-epoch shuffles of its own training split. So the task at any
position of the stream is a pure function of the seed and the position (exact resume), and
the mix holds at every scale, not only on average. Frontier sampling keeps the environment
of every slot and chooses within that environment among `candidates` of its stream.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import cached_property

from agenttrain.config import ConfigError
from agenttrain.envs import EnvSpec, get_spec
from agenttrain.envs.source import EnvSource
from agenttrain.rl.config import EnvConfig


@dataclass(frozen=True)
class Slot:
    """One drawn task: position in the stream, environment, task id."""

    index: int
    env: str
    task: int


@dataclass
class RunEnvironment:
    """One environment of a run: its settings, spec, tasks and where its episodes run."""

    config: EnvConfig
    spec: EnvSpec
    source: EnvSource
    train_tasks: list[int]
    val_tasks: list[int]
    turn_limit: int

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass
class RunEnvironments:
    parts: list[RunEnvironment]
    seed: int
    _orders: dict[tuple[str, int], list[int]] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        configs: list[EnvConfig],
        *,
        seed: int,
        val_tasks: int,
        validate: bool,
        default_turns: int | None,
        timeout_s: float,
    ) -> RunEnvironments:
        parts = []
        for config in configs:
            spec = get_spec(config.name)
            source = EnvSource(
                config.name,
                kwargs=config.kwargs,
                servers=config.servers,
                token=config.token,
                timeout_s=timeout_s,
            )
            val = list(spec.split(config.val_split))[:val_tasks] if validate else []
            turns = config.max_turns or default_turns or spec.default_max_turns
            train = tasks_in_strata(spec, config, list(spec.split(config.split)))
            parts.append(RunEnvironment(config, spec, source, train, val, turns))
        return cls(parts, seed)

    @property
    def multi(self) -> bool:
        return len(self.parts) > 1

    def __getitem__(self, name: str) -> RunEnvironment:
        return next(part for part in self.parts if part.name == name)

    @cached_property
    def _round(self) -> list[int]:
        """Part indices of one round: `weight` of each, interleaved (largest share first)."""
        weights = [part.config.weight for part in self.parts]
        pattern: list[int] = []
        credit = [0.0] * len(weights)
        for _ in range(sum(weights)):  # smooth weighted round robin
            for index, weight in enumerate(weights):
                credit[index] += weight
            chosen = max(range(len(weights)), key=lambda i: credit[i])
            credit[chosen] -= sum(weights)
            pattern.append(chosen)
        return pattern

    def narrow(self, name: str, tasks: list[int]) -> None:
        """Draw only `tasks` of environment `name` from now on (screening's kept set). The
        stream stays a pure function of the seed, the position and the task list."""
        self[name].train_tasks = tasks
        self._orders = {key: order for key, order in self._orders.items() if key[0] != name}

    def slot(self, index: int) -> Slot:
        """The task at position `index` of the run's task stream."""
        part, position = self._place(index)
        return Slot(index, part.name, self._task(part, position))

    def candidates(self, index: int, count: int) -> list[Slot]:
        """Frontier sampling's choice for slot `index`: `count` consecutive tasks of the slot's
        environment stream. The environment's k-th slot looks at its positions k·count to
        k·count + count − 1: consecutive slots see disjoint windows, and each pass over the
        split offers every task once (candidates not picked come round again next pass)."""
        part, position = self._place(index)
        start = position * count
        return [Slot(index, part.name, self._task(part, start + offset)) for offset in range(count)]

    def _place(self, index: int) -> tuple[RunEnvironment, int]:
        """The environment of slot `index` (by the weighted round) and how many slots that
        environment had before it."""
        pattern = self._round
        round_number, position = divmod(index, len(pattern))
        part_index = pattern[position]
        part = self.parts[part_index]
        within = pattern[:position].count(part_index)
        return part, round_number * part.config.weight + within

    def _task(self, part: RunEnvironment, position: int) -> int:
        epoch, offset = divmod(position, len(part.train_tasks))
        key = (part.name, epoch)
        if key not in self._orders:
            order = list(part.train_tasks)
            prefix = "" if not self.multi else f"{part.name}/"
            random.Random(f"{self.seed}/{prefix}epoch/{epoch}").shuffle(order)
            self._orders = {k: v for k, v in self._orders.items() if k[0] != part.name}
            self._orders[key] = order
        return self._orders[key][offset]

    def epoch(self, consumed: int) -> float:
        """Epochs of the (first) environment's training split consumed so far."""
        first = self.parts[0]
        share = first.config.weight / sum(part.config.weight for part in self.parts)
        return consumed * share // len(first.train_tasks)


def tasks_in_strata(spec: EnvSpec, config: EnvConfig, tasks: list[int]) -> list[int]:
    """The tasks of `config.task_strata`'s difficulty classes (all if it is empty), in split
    order; a class the split does not have is an error that lists those it has."""
    if not config.task_strata:
        return tasks
    classify = spec.task_stratum
    if classify is None:
        raise ConfigError(
            f"env.task_strata={config.task_strata}: {spec.name} has no difficulty classes "
            "(environments with them: those whose spec sets task_stratum, e.g. textcraft)"
        )
    strata = {task: classify(task) for task in tasks}
    missing = [name for name in config.task_strata if name not in strata.values()]
    if missing:
        known = ", ".join(sorted(set(strata.values())))
        raise ConfigError(
            f"env.task_strata: {spec.name}'s {config.split} split has no tasks of {missing}; "
            f"its classes: {known}"
        )
    return [task for task in tasks if strata[task] in config.task_strata]
