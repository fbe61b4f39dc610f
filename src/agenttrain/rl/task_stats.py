"""Per-task success estimates kept across training steps, and frontier task sampling on them.

GRPO-style estimators learn only from groups whose rewards differ: a task the policy always
solves, or never does, costs a group of episodes and teaches nothing. The trainer counts each
task's successes and episodes in its training rollouts; frontier sampling draws a few candidate
tasks from the uniform stream per slot and picks one with probability proportional to

    priority = p̂ (1 − p̂) + floor,    p̂ = (successes + m·k) / (episodes + k)

where p̂ is the mean of the task's Beta posterior under a Beta(m·k, (1 − m)·k) prior, m the run's
running success rate (0.5 before any episode), k `data.frontier.prior_strength`. An unseen
task gets the prior's value m (1 − m) + floor; the floor keeps every task drawable.

With `data.frontier.target: signal` the estimate is of what GRPO actually needs, the chance
that the task's group has a learning signal (its rewards differ): q̂ from the task's informative
and played groups in the same Beta form, and priority = q̂ + floor. Success counts miss the
signal of partial-credit rewards (`reward.progress_weight`: a depth-2 goal never solved can
still give groups whose progress differs) and call a task solved half the time as good as one
whose eight samples always split 8/0 by seed.

When the environment knows a task's difficulty class without playing it (`EnvSpec.
task_stratum`; TextCraft: crafting depth), m is the class's rate instead, itself pooled toward
the run's rate with the same strength: (class successes + k·run rate) / (class episodes + k).
Tasks rarely repeat within a short run; their classes do, so after one round an unseen
depth-3 task is already known to be hopeless and an unseen depth-1 task promising.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean

from agenttrain.rl.config import FrontierConfig
from agenttrain.rl.config import FrontierTarget as Target
from agenttrain.rl.environments import Slot
from agenttrain.rollout.trajectory import Trajectory, read_jsonl

TaskKey = tuple[str, int]
"""(environment name, task id): task ids are only unique within one environment."""
Stratum = Callable[[TaskKey], str | None]
"""A task's difficulty class (None: unknown), see `EnvSpec.task_stratum`."""


@dataclass
class TaskRecord:
    successes: int = 0
    episodes: int = 0
    groups: int = 0
    """Groups played (one per slot) that kept a baseline despite environment errors."""
    informative: int = 0
    """Of those, groups whose rewards differed (a learning signal)."""

    def counts(self, target: Target) -> tuple[int, int]:
        """(hits, trials) of the quantity frontier sampling estimates."""
        if target == "success":
            return self.successes, self.episodes
        return self.informative, self.groups


def totals(entries: Iterable[TaskRecord], target: Target) -> tuple[int, int]:
    """Summed (hits, trials) of `target` over some tasks' records."""
    pairs = [entry.counts(target) for entry in entries]
    return sum(h for h, _ in pairs), sum(t for _, t in pairs)


@dataclass
class TaskStats:
    """Successes and episodes per task seen in training rollouts (environment errors excluded:
    they say nothing about the policy)."""

    records: dict[TaskKey, TaskRecord] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.records)

    def record(self, trajectories: Iterable[Trajectory]) -> None:
        """Count the episodes of one generation round."""
        for trajectory in trajectories:
            if trajectory.errored:
                continue
            entry = self.records.setdefault((trajectory.env, trajectory.task_id), TaskRecord())
            entry.episodes += 1
            entry.successes += int(trajectory.success)

    def record_groups(self, groups: Iterable[tuple[TaskKey, bool]]) -> None:
        """Count one generation round's groups: (task, whether its rewards differed)."""
        for key, informative in groups:
            entry = self.records.setdefault(key, TaskRecord())
            entry.groups += 1
            entry.informative += int(informative)

    def rate(self, target: Target = "success") -> float:
        """The run's running rate over every counted episode or group (0.5 before any)."""
        hits, trials = totals(self.records.values(), target)
        return hits / trials if trials else 0.5

    def success_rate(self) -> float:
        """The run's running success rate over every counted episode (0.5 before any)."""
        return self.rate("success")

    def stratum_rate(
        self,
        stratum: str,
        of: Stratum,
        run_rate: float,
        prior_strength: float,
        target: Target = "success",
    ) -> float:
        """The pooled rate of the tasks of one class, pulled toward the run's rate."""
        members = (entry for key, entry in self.records.items() if of(key) == stratum)
        hits, trials = totals(members, target)
        return (hits + run_rate * prior_strength) / (trials + prior_strength)

    def estimate(
        self, key: TaskKey, prior_mean: float, prior_strength: float, target: Target = "success"
    ) -> float:
        """The task's posterior mean rate: the prior's mean for an unseen task."""
        hits, trials = self.records.get(key, TaskRecord()).counts(target)
        return (hits + prior_mean * prior_strength) / (trials + prior_strength)

    def state(self) -> list[list[str | int]]:
        """Checkpoint form: `[env, task, successes, episodes, groups, informative]` rows."""
        return [
            [env, task, r.successes, r.episodes, r.groups, r.informative]
            for (env, task), r in self.records.items()
        ]

    @classmethod
    def from_state(cls, rows: Sequence[Sequence[str | int]]) -> TaskStats:
        """Rows of `state()`; checkpoints written before group counts have four columns."""
        return cls(
            {(str(env), int(task)): TaskRecord(*map(int, counts)) for env, task, *counts in rows}
        )


@dataclass(frozen=True)
class TrainingTasks:
    """One environment's tasks as a run sees them: its training split, and the tasks of it
    the run draws (fewer with `env.task_strata`, or validation tasks carved from the split)."""

    split: Collection[int]
    drawn: Collection[int]


def screened(files: Sequence[Path], tasks: Mapping[str, TrainingTasks]) -> tuple[TaskStats, int]:
    """Per-task statistics from episodes the starting model played before training
    (`data.frontier.seed_from`), and how many episodes were left out as tasks the run never
    draws. They count as the task's episodes, and a file's samples of one task as one group,
    informative when their rewards differ. An episode of another environment or outside the
    training split is refused: a test task must not steer training."""
    stats = TaskStats()
    skipped = 0
    for file in files:
        if not file.is_file():
            raise FileNotFoundError(f"data.frontier.seed_from: {file} does not exist")
        episodes = [t for t in read_jsonl(file) if not t.errored]
        if not episodes:
            raise ValueError(f"data.frontier.seed_from: {file} holds no scored episode")
        for trajectory in episodes:
            _check_training_task(file, trajectory, tasks)
        drawn = [t for t in episodes if t.task_id in tasks[t.env].drawn]
        skipped += len(episodes) - len(drawn)
        stats.record(drawn)
        rewards: dict[TaskKey, list[float | None]] = defaultdict(list)
        for trajectory in drawn:
            rewards[(trajectory.env, trajectory.task_id)].append(trajectory.reward)
        stats.record_groups(
            (key, len(set(values)) > 1) for key, values in rewards.items() if len(values) > 1
        )
    return stats, skipped


def mixed_tasks(stats: TaskStats) -> set[TaskKey]:
    """The tasks with both a success and a failure among their counted episodes."""
    return {key for key, record in stats.records.items() if 0 < record.successes < record.episodes}


def _check_training_task(
    file: Path, trajectory: Trajectory, tasks: Mapping[str, TrainingTasks]
) -> None:
    mine = tasks.get(trajectory.env)
    if mine is None:
        raise ValueError(
            f"data.frontier.seed_from: {file} holds {trajectory.env} episodes; this run "
            f"trains on {', '.join(tasks)}"
        )
    if trajectory.task_id not in mine.split:
        raise ValueError(
            f"data.frontier.seed_from: {file}: {trajectory.env} task {trajectory.task_id} is "
            "not in the run's training split; evaluate the starting model on that split "
            "(agenttrain eval --split <env.split> ...)"
        )


def priority(estimate: float, floor: float, target: Target = "success") -> float:
    """success: p (1 − p) + floor, largest at p = 0.5, where a group's rewards differ most
    often; signal: the estimated chance of a learning signal itself, q + floor."""
    if target == "signal":
        return estimate + floor
    return estimate * (1.0 - estimate) + floor


@dataclass(frozen=True)
class Pick:
    """One frontier choice: the slot played, its priority, whether its task was unseen, and
    whether it came from the replay candidates rather than the stream."""

    slot: Slot
    priority: float
    unseen: bool
    replayed: bool = False


def pick_frontier(
    candidates: Sequence[Slot],
    stats: TaskStats,
    settings: FrontierConfig,
    seed: int,
    stratum: Stratum | None = None,
    played: Collection[TaskKey] = (),
) -> Pick:
    """Pick one candidate with probability proportional to its priority. Seeded by the run's
    seed and the slot's index: a pure function of (seed, slot, stats, played), so a resumed run
    that restored its stats picks the same tasks. With `settings.replay`, the known tasks of
    the slot's environment with the highest priorities join the stream's candidates, except
    those offered already or `played` earlier in the step."""
    weigh = weigher(stats, settings, stratum)
    first = candidates[0]
    offered = {(slot.env, slot.task) for slot in candidates}
    replays = replay_slots(stats, weigh, first, settings.replay, offered | set(played))
    pool = [*candidates, *replays]
    weights = [weigh((slot.env, slot.task)) for slot in pool]
    rng = random.Random(f"{seed}/frontier/{first.index}")
    chosen = rng.choices(range(len(pool)), weights=weights)[0]
    slot = pool[chosen]
    unseen = (slot.env, slot.task) not in stats.records
    return Pick(slot, weights[chosen], unseen, replayed=chosen >= len(candidates))


def weigher(
    stats: TaskStats, settings: FrontierConfig, stratum: Stratum | None
) -> Callable[[TaskKey], float]:
    """A task's priority under the current stats; each class's prior is computed once."""
    target, strength = settings.target, settings.prior_strength
    run_rate = stats.rate(target)
    priors: dict[str | None, float] = {}

    def prior(key: TaskKey) -> float:
        label = stratum(key) if stratum is not None else None
        if label not in priors:
            priors[label] = (
                run_rate
                if label is None or stratum is None
                else stats.stratum_rate(label, stratum, run_rate, strength, target)
            )
        return priors[label]

    def weigh(key: TaskKey) -> float:
        return priority(stats.estimate(key, prior(key), strength, target), settings.floor, target)

    return weigh


def replay_slots(
    stats: TaskStats,
    weigh: Callable[[TaskKey], float],
    slot: Slot,
    count: int,
    exclude: Collection[TaskKey],
) -> list[Slot]:
    """The `count` tasks of the slot's environment already played (not in `exclude`) with the
    highest priorities, as candidates for that slot; ties go to the lower task id."""
    if not count:
        return []
    known = [key for key in stats.records if key[0] == slot.env and key not in exclude]
    known.sort(key=lambda key: (-weigh(key), key[1]))
    return [Slot(slot.index, env, task) for env, task in known[:count]]


def sampling_metrics(
    picks: Sequence[Pick], stats: TaskStats, settings: FrontierConfig
) -> dict[str, float]:
    """`sampling/*` for one step's frontier picks (every generation round); the replay share
    only where replay is on."""
    metrics = {
        "sampling/priority_mean": fmean(pick.priority for pick in picks),
        "sampling/unseen_share": fmean(pick.unseen for pick in picks),
        "sampling/tasks_with_stats": len(stats),
        "sampling/prior_success": stats.success_rate(),
        "sampling/prior_signal": stats.rate("signal"),
    }
    if settings.replay:
        metrics["sampling/replay_share"] = fmean(pick.replayed for pick in picks)
    return metrics
