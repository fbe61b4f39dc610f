"""Evaluation metrics over episodes.

pass@k is the unbiased estimator of Chen et al. (2021): with n samples of a task of which c
succeed, pass@k = 1 - C(n-c, k) / C(n, k), averaged over tasks. avg@n is the mean success of
the n samples per task, averaged over tasks (AgentGym-RL's Avg@n).

Episodes that ended in an environment error carry no score, and hiding them would flatter a
run whose server died, so both views are reported: `success_rate` over scored episodes and
`success_rate_all` with every env error counted as a failure, next to `env_errors`. pass@k
and avg@n average over the tasks that kept at least k (n) scored samples;
`tasks_per_metric` says how many that is for each.

Intervals are percentile bootstraps over tasks (a drawn task brings all its samples, since
samples of one task are correlated): `success_rate_ci` and `mean_reward_ci` in every summary,
and `paired_difference` for two models on the same tasks, which draws the same task ids for
both. Each metric is a ratio of per-task totals, so a resample weighs tasks by their scored
episodes exactly as the point estimate does.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from math import comb
from statistics import fmean
from typing import Any

import numpy as np

from agenttrain.rollout.trajectory import FINISH_REASONS, Trajectory


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples (drawn from n with c correct) is correct."""
    if not 0 <= c <= n or k < 1:
        raise ValueError(f"need 0 <= c <= n and k >= 1, got n={n} c={c} k={k}")
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per task, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def default_ks(samples_per_task: int) -> list[int]:
    """Powers of two up to the sample count, and the sample count itself."""
    ks = [k for k in (1, 2, 4, 8, 16, 32, 64) if k < samples_per_task]
    return [*ks, max(1, samples_per_task)]


def summarize(
    trajectories: Sequence[Trajectory], ks: Iterable[int] | None = None, group_by: str | None = None
) -> dict[str, Any]:
    """Headline metrics for a set of episodes (and per value of `task_info[group_by]`)."""
    summary = _metrics(trajectories, ks)
    if group_by:
        groups: dict[Any, list[Trajectory]] = defaultdict(list)
        for trajectory in trajectories:
            # An episode that failed before its first observation has no value to group by;
            # it is counted in the totals, not as a group of its own ("depth None").
            if trajectory.task_info.get(group_by) is not None:
                groups[trajectory.task_info[group_by]].append(trajectory)
        summary[f"by_{group_by}"] = {
            str(value): _metrics(members, ks)
            for value, members in sorted(groups.items(), key=lambda kv: str(kv[0]))
        }
    return summary


def _metrics(trajectories: Sequence[Trajectory], ks: Iterable[int] | None) -> dict[str, Any]:
    scored = [t for t in trajectories if not t.errored]
    episodes_per_task: dict[int, int] = defaultdict(int)
    for trajectory in trajectories:
        episodes_per_task[trajectory.task_id] += 1
    samples = max(episodes_per_task.values(), default=0)
    successes = sum(t.success for t in scored)
    turns = [t.num_turns for t in scored]
    all_turns = sum(t.num_turns for t in trajectories)
    env_errors = sum(t.finish_reason == "env_error" for t in trajectories)
    agent_errors = len(trajectories) - len(scored) - env_errors
    # A rate without a denominator is no result (None, shown as "-"), never 0.
    metrics: dict[str, Any] = {
        "episodes": len(trajectories),
        "scored_episodes": len(scored),
        "env_errors": env_errors,
        "agent_errors": agent_errors,
        "tasks": len(episodes_per_task),
        "samples_per_task": samples,
        "success_rate": successes / len(scored) if scored else None,
        "success_rate_all": successes / len(trajectories) if trajectories else None,
        "mean_reward": fmean(t.reward for t in scored if t.reward is not None) if scored else None,
        "mean_turns": fmean(turns) if turns else None,
        "format_error_rate": (
            sum(t.format_errors for t in trajectories) / all_turns if all_turns else 0.0
        ),
        "env_error_rate": env_errors / len(trajectories) if trajectories else 0.0,
        "agent_error_rate": agent_errors / len(trajectories) if trajectories else 0.0,
        "finish_reasons": {
            reason: sum(t.finish_reason == reason for t in trajectories)
            for reason in FINISH_REASONS
        },
        "generated_tokens": sum(t.generated_tokens for t in trajectories),
        "success_rate_ci": bootstrap_interval(task_parts(trajectories, "success_rate")),
        "mean_reward_ci": bootstrap_interval(task_parts(trajectories, "mean_reward")),
    }
    if samples:
        wanted = [k for k in (ks or default_ks(samples)) if k <= samples]
        metrics.update(_at_k(scored, wanted, samples))
    return metrics


def _at_k(scored: Sequence[Trajectory], ks: Sequence[int], samples: int) -> dict[str, Any]:
    """pass@k for each k and avg@samples, each over the tasks with enough scored samples.

    A task that lost samples to env errors still counts for the smaller k it can support,
    so one dead episode no longer makes pass@k for k > 1 vanish; a metric no task supports
    is None (with 0 tasks), so the keys are the same whatever failed.
    """
    per_task: dict[int, list[bool]] = defaultdict(list)
    for trajectory in scored:
        per_task[trajectory.task_id].append(trajectory.success)
    at_k: dict[str, Any] = {}
    counted: dict[str, int] = {}
    full = [v for v in per_task.values() if len(v) >= samples]
    at_k[f"avg@{samples}"] = fmean(sum(v) / len(v) for v in full) if full else None
    counted[f"avg@{samples}"] = len(full)
    for k in ks:
        enough = [v for v in per_task.values() if len(v) >= k]
        at_k[f"pass@{k}"] = fmean(pass_at_k(len(v), sum(v), k) for v in enough) if enough else None
        counted[f"pass@{k}"] = len(enough)
    return {**at_k, "tasks_per_metric": counted}


BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95
BOOTSTRAP_SEED = 0

TaskKey = tuple[str, int]
"""(environment, task id): a task across evaluations, so two environments share none."""

EPISODE_PARTS: dict[str, Callable[[Trajectory], tuple[float, float]]] = {
    "success_rate": lambda t: (float(t.success), 1.0),
    "mean_reward": lambda t: (float(t.reward or 0.0), 1.0),
    "mean_turns": lambda t: (float(t.num_turns), 1.0),
    "format_error_rate": lambda t: (float(t.format_errors), float(t.num_turns)),
    "format_error_episodes": lambda t: (float(t.format_errors > 0), 1.0),
}
"""Each metric as a ratio of totals: an episode's (numerator, denominator) parts. Env-error
episodes take no part (they have no score), as in `summarize`."""


@dataclass(frozen=True)
class Difference:
    """`other - first` over the tasks both have, with its paired bootstrap interval."""

    estimate: float
    low: float
    high: float
    tasks: int

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "excludes_zero": self.excludes_zero}


def task_parts(
    trajectories: Iterable[Trajectory], metric: str
) -> dict[TaskKey, tuple[float, float]]:
    """Per task, the summed numerator and denominator of `metric` over its scored episodes;
    tasks with a zero denominator (every episode an env error) are left out."""
    parts = EPISODE_PARTS[metric]
    totals: dict[TaskKey, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for trajectory in trajectories:
        if not trajectory.errored:
            numerator, denominator = parts(trajectory)
            total = totals[(trajectory.env, trajectory.task_id)]
            total[0] += numerator
            total[1] += denominator
    return {key: (num, den) for key, (num, den) in totals.items() if den > 0}


def _resampled_ratios(
    numerators: np.ndarray, denominators: np.ndarray, picks: np.ndarray
) -> np.ndarray:
    """The metric (ratio of totals) of each resample: one row of task indices per resample."""
    return numerators[picks].sum(axis=1) / denominators[picks].sum(axis=1)


def _picks(tasks: int, resamples: int, seed: int) -> np.ndarray:
    """Task indices drawn with replacement: resamples × tasks, the same for the same seed."""
    return np.random.default_rng(seed).integers(0, tasks, size=(resamples, tasks))


def _percentiles(values: np.ndarray, confidence: float) -> tuple[float, float]:
    tail = (1 - confidence) / 2
    low, high = np.quantile(values, [tail, 1 - tail])
    return float(low), float(high)


def bootstrap_interval(
    parts: dict[TaskKey, tuple[float, float]],
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of a ratio metric, resampling tasks with replacement and
    keeping every sample of a drawn task (samples of one task are not independent). None
    without tasks."""
    if not parts:
        return None
    numerators, denominators = np.array(list(parts.values())).T
    picks = _picks(len(parts), resamples, seed)
    return _percentiles(_resampled_ratios(numerators, denominators, picks), confidence)


def paired_difference(
    first: dict[TaskKey, tuple[float, float]],
    other: dict[TaskKey, tuple[float, float]],
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = BOOTSTRAP_SEED,
) -> Difference | None:
    """`other - first` over their shared tasks; each resample draws the same task ids for
    both, so task difficulty, which both share, cancels out of the interval. None without
    shared tasks."""
    shared = sorted(first.keys() & other.keys())
    if not shared:
        return None
    a_num, a_den, b_num, b_den = np.array([first[key] + other[key] for key in shared]).T
    picks = _picks(len(shared), resamples, seed)
    differences = _resampled_ratios(b_num, b_den, picks) - _resampled_ratios(a_num, a_den, picks)
    low, high = _percentiles(differences, confidence)
    estimate = b_num.sum() / b_den.sum() - a_num.sum() / a_den.sum()
    return Difference(float(estimate), low, high, len(shared))


def differences_to_first(
    episodes: dict[str, Sequence[Trajectory]],
    metrics: Sequence[str] = ("success_rate", "mean_reward"),
) -> dict[str, dict[str, Any]]:
    """For every model after the first: its paired difference to the first on each metric."""
    models = list(episodes)
    if len(models) < 2:
        return {}
    baseline = {m: task_parts(episodes[models[0]], m) for m in metrics}
    result: dict[str, dict[str, Any]] = {}
    for model in models[1:]:
        entry: dict[str, Any] = {"baseline": models[0]}
        for metric in metrics:
            difference = paired_difference(baseline[metric], task_parts(episodes[model], metric))
            entry[metric] = difference.to_dict() if difference else None
        result[model] = entry
    return result
