"""Evaluation metrics over episodes.

pass@k is the unbiased estimator of Chen et al. (2021): with n samples of a task of which c
succeed, pass@k = 1 - C(n-c, k) / C(n, k), averaged over tasks. avg@n is the mean success of
the n samples per task, averaged over tasks (AgentGym-RL's Avg@n). Episodes that ended in an
environment error carry no score: they are excluded from both and counted on their own.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from math import comb
from statistics import fmean
from typing import Any

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
    ks = [1, 2, 4, 8, 16, 32, 64]
    return [k for k in ks if k <= samples_per_task] or [1]


def summarize(
    trajectories: Sequence[Trajectory], ks: Iterable[int] | None = None, group_by: str | None = None
) -> dict[str, Any]:
    """Headline metrics for a set of episodes (and per value of `task_info[group_by]`)."""
    summary = _metrics(trajectories, ks)
    if group_by:
        groups: dict[Any, list[Trajectory]] = defaultdict(list)
        for trajectory in trajectories:
            groups[trajectory.task_info.get(group_by)].append(trajectory)
        summary[f"by_{group_by}"] = {
            str(value): _metrics(members, ks)
            for value, members in sorted(groups.items(), key=lambda kv: str(kv[0]))
        }
    return summary


def _metrics(trajectories: Sequence[Trajectory], ks: Iterable[int] | None) -> dict[str, Any]:
    scored = [t for t in trajectories if t.finish_reason != "env_error"]
    per_task: dict[int, list[bool]] = defaultdict(list)
    for trajectory in scored:
        per_task[trajectory.task_id].append(trajectory.success)
    least = min((len(v) for v in per_task.values()), default=0)
    ks = [k for k in (ks or default_ks(least)) if k <= least]
    turns = [t.num_turns for t in scored]
    all_turns = sum(t.num_turns for t in trajectories)
    metrics: dict[str, Any] = {
        "episodes": len(trajectories),
        "tasks": len(per_task),
        "samples_per_task": least,
        "success_rate": fmean(t.success for t in scored) if scored else 0.0,
        "mean_reward": fmean(t.reward for t in scored if t.reward is not None) if scored else 0.0,
        "mean_turns": fmean(turns) if turns else 0.0,
        "format_error_rate": (
            sum(t.format_errors for t in trajectories) / all_turns if all_turns else 0.0
        ),
        "env_error_rate": (
            sum(t.finish_reason == "env_error" for t in trajectories) / len(trajectories)
            if trajectories
            else 0.0
        ),
        "finish_reasons": {
            reason: sum(t.finish_reason == reason for t in trajectories)
            for reason in FINISH_REASONS
        },
        "generated_tokens": sum(t.generated_tokens for t in trajectories),
    }
    if per_task:
        metrics[f"avg@{least}"] = fmean(sum(v) / len(v) for v in per_task.values())
        for k in ks:
            metrics[f"pass@{k}"] = fmean(pass_at_k(len(v), sum(v), k) for v in per_task.values())
    return metrics
