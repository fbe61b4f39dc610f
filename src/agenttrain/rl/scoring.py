"""A training step's episode scores: the reward pipeline the trainer applies, in one place.

The environment's reward (or a custom verl-style function's), plus partial credit for
progress, minus the format, loop and recovery penalties, each as `reward.*` configures it.
Built before the model, so a setting an environment cannot honour fails at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agenttrain.envs.base import EnvSpec
from agenttrain.rl.config import RewardConfig
from agenttrain.rl.rewards import (
    add_progress,
    cap_at_credit,
    in_solved_groups,
    load_reward_function,
    progress_functions,
    progress_weight_at,
    recovery_functions,
    refusal_functions,
    score_episode,
    subtract_format_penalty,
    subtract_loop_penalty,
    subtract_recovery_penalty,
)
from agenttrain.rollout.trajectory import Trajectory

Extras = dict[str, list[float]]
"""Per-episode values of extra metrics (`reward/...`, `reward_extra/...`), averaged when logged."""


class EpisodeScorer:
    """Scores episodes for training as `reward` asks, for the environments in `specs`."""

    def __init__(self, reward: RewardConfig, specs: Sequence[EnvSpec]) -> None:
        self.reward = reward
        self.progress = progress_functions(specs, reward.progress_weight)
        """Partial credit per environment (empty unless `reward.progress_weight` asks)."""
        self.refusals = refusal_functions(specs, reward.loop_penalty)
        """Refusal tests per environment (empty unless `reward.loop_penalty` asks)."""
        self.recoveries = recovery_functions(specs, reward.recovery_penalty)
        """Recovery counts per environment (empty unless `reward.recovery_penalty` asks)."""
        custom = reward.custom_function
        self.reward_fn = load_reward_function(custom.path, custom.name) if custom.path else None

    def progress_weight(self, step: int) -> float:
        """This step's partial-credit weight (`reward.progress_weight`, faded if asked)."""
        return progress_weight_at(
            step, self.reward.progress_weight, self.reward.progress_fade_steps
        )

    def score(
        self, trajectories: list[Trajectory], step: int, tokenizer: Any = None
    ) -> tuple[list[float], Extras]:
        """Each episode's training score: the base score plus partial credit for progress
        (faded by step when `reward.progress_fade_steps` says so), minus `format_penalty` for
        an episode with a reply the action format refused, minus `loop_penalty` times its
        share of looping turns, minus `recovery_penalty` times its share of refusals not
        recovered from (each only in groups with a success when its `*_penalty_groups` is
        `solved`; together at most a failure's partial credit when `refusal_penalty_cap` is
        `progress`); and the per-episode values of the extra metrics."""
        scores, extras = self._base_scores(trajectories, tokenizer)
        credited, progress = add_progress(
            trajectories, scores, self.progress, self.progress_weight(step)
        )
        reward = self.reward
        formatted, penalised = subtract_format_penalty(
            trajectories, credited, reward.format_penalty
        )
        solved = in_solved_groups(trajectories)
        shaped, looping = subtract_loop_penalty(
            trajectories,
            formatted,
            reward.loop_penalty,
            self.refusals,
            solved if reward.loop_penalty_groups == "solved" else None,
        )
        shaped, unrecovered = subtract_recovery_penalty(
            trajectories,
            shaped,
            reward.recovery_penalty,
            self.recoveries,
            solved if reward.recovery_penalty_groups == "solved" else None,
        )
        if reward.refusal_penalty_cap == "progress":
            credit = [c - s for c, s in zip(credited, scores, strict=True)]
            shaped = cap_at_credit(trajectories, formatted, shaped, credit)
        return shaped, {**extras, **progress, **penalised, **looping, **unrecovered}

    def _base_scores(
        self, trajectories: list[Trajectory], tokenizer: Any
    ) -> tuple[list[float], Extras]:
        """The environment's rewards, or the custom function's scores and extra values
        (`tokenizer` decodes the response it reads, as verl's `solution_str`)."""
        if self.reward_fn is None:
            return [t.reward if t.reward is not None else 0.0 for t in trajectories], {}
        scores: list[float] = []
        extras: Extras = {}
        kwargs = dict(self.reward.custom_function.kwargs)
        for trajectory in trajectories:
            if trajectory.errored:
                scores.append(0.0)  # excluded from training; never scored
                continue
            scored = score_episode(self.reward_fn, trajectory, tokenizer, kwargs)
            scores.append(scored.score)
            for key, value in scored.extra.items():
                extras.setdefault(f"reward_extra/{key}", []).append(value)
        return scores, extras
