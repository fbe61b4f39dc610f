"""A training step's rollout metrics (verl's names where verl has one) and its progress line."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from statistics import fmean

from agenttrain.rl.stats import actions_by_verb, stats
from agenttrain.rollout.trajectory import Trajectory


def rollout_metrics(
    trajectories: list[Trajectory],
    scores: list[float],
    engine_stats: dict[str, float],
    max_turns: int,
    verbs: Mapping[str, Sequence[str]],
    oracle_start: bool = False,
) -> dict[str, float]:
    """Episodes and errors, score/length/turn statistics of the unerrored episodes, success
    and format-error rates, the share of replies cut off by the token limit, actions by verb
    (`verbs`: each environment's action words), and with `oracle_start` (the run starts
    episodes from oracle turns) the oracle-start share."""
    valid = [t for t in trajectories if not t.errored]
    played = max(len(trajectories), 1)
    env_errors = sum(t.finish_reason == "env_error" for t in trajectories)
    metrics: dict[str, float] = {
        "rollout/episodes": len(trajectories),
        "rollout/env_error_episodes": env_errors,
        "rollout/agent_error_episodes": sum(t.finish_reason == "agent_error" for t in trajectories),
        "rollout/error_rate": 1 - len(valid) / played,
        "rollout/env_error_rate": env_errors / played,
        "rollout/max_turns": max_turns,
        "perf/generated_tokens": engine_stats.get("generated_tokens", 0),
    }
    usable_scores = [s for s, t in zip(scores, trajectories, strict=True) if not t.errored]
    metrics.update(stats("critic/score", usable_scores))
    metrics.update(stats("response_length", [len(t.response_ids) for t in valid]))
    metrics.update(stats("prompt_length", [len(t.prompt_ids) for t in valid]))
    metrics.update(stats("num_turns", [t.num_turns for t in valid]))
    metrics.update(actions_by_verb(valid, verbs))
    if not valid:
        return metrics
    metrics["env/success_rate"] = fmean(t.success for t in valid)
    turns = sum(t.num_turns for t in valid)
    metrics["env/format_error_rate"] = sum(t.format_errors for t in valid) / max(turns, 1)
    cut_off = sum(turn.cut_off for t in valid for turn in t.turns)
    metrics["env/cut_off_rate"] = cut_off / max(turns, 1)
    metrics["response_length/clip_ratio"] = fmean(t.finish_reason == "context_limit" for t in valid)
    if oracle_start:
        metrics["rollout/oracle_turns"] = fmean(t.oracle_turns for t in valid)
        from_scratch = [t for t in valid if not t.oracle_turns]
        if from_scratch:
            metrics["env/success_rate_from_scratch"] = fmean(t.success for t in from_scratch)
    return metrics


def per_environment_metrics(
    trajectories: list[Trajectory], scores: list[float], names: Sequence[str]
) -> dict[str, float]:
    """`env/<name>/...` for each environment of a multi-environment run."""
    metrics: dict[str, float] = {}
    for name in names:
        mine = [i for i, t in enumerate(trajectories) if t.env == name]
        valid = [i for i in mine if not trajectories[i].errored]
        prefix = f"env/{name}"
        metrics[f"{prefix}/episodes"] = len(mine)
        metrics[f"{prefix}/env_error_episodes"] = len(mine) - len(valid)
        if valid:
            metrics[f"{prefix}/success_rate"] = fmean(trajectories[i].success for i in valid)
            metrics[f"{prefix}/score_mean"] = fmean(scores[i] for i in valid)
            metrics[f"{prefix}/num_turns_mean"] = fmean(trajectories[i].num_turns for i in valid)
    return metrics


STRATUM_PREFIX = "rollout/stratum/"


def stratum_metrics(
    trajectories: Sequence[Trajectory],
    informative_ids: set[str],
    stratum: Callable[[tuple[str, int]], str | None],
) -> dict[str, float]:
    """`rollout/stratum/<class>/{groups,informative_groups,solved_groups}` per difficulty
    class of the step's groups (TextCraft: "depth 2" -> `depth_2`): where the learning signal
    came from. A run's average success hides that every informative group may be an easy goal;
    `solved_groups` (groups with a success) says whether the deep goals were ever solved."""
    groups: dict[str, list[Trajectory]] = {}
    for trajectory in trajectories:
        groups.setdefault(trajectory.group_id, []).append(trajectory)
    metrics: dict[str, float] = {}
    for group_id, members in groups.items():
        label = stratum((members[0].env, members[0].task_id))
        if label is None:
            continue
        prefix = STRATUM_PREFIX + label.replace(" ", "_")
        solved = any(t.success for t in members if not t.errored)
        for name, count in (
            ("groups", 1),
            ("informative_groups", group_id in informative_ids),
            ("solved_groups", solved),
        ):
            metrics[f"{prefix}/{name}"] = metrics.get(f"{prefix}/{name}", 0) + int(count)
    return metrics


def status_line(metrics: dict[str, float]) -> str:
    """The progress bar's summary of a step: errors, mean reward, validation, KL, entropy, loss."""
    parts = []
    for kind in ("env", "agent"):
        errors = metrics.get(f"rollout/{kind}_error_episodes", 0)
        if errors:
            parts.append(f"{kind} errors {errors:.0f}/{metrics['rollout/episodes']:.0f}")
    reward = metrics.get("critic/score/mean", math.nan)
    parts.append("reward -" if math.isnan(reward) else f"reward {reward:.3f}")
    for key, label in (
        ("val/success_rate", "val"),
        ("actor/kl_loss", "kl"),
        ("actor/entropy", "entropy"),
        ("actor/pg_loss", "loss"),
    ):
        if key in metrics:
            parts.append(f"{label} {metrics[key]:.3g}")
    return " · ".join(parts)
