"""The episodes one training step collected (over one or more generation rounds), and which
of them it trains on."""

from __future__ import annotations

from dataclasses import dataclass, field

from agenttrain.rollout.trajectory import Trajectory


@dataclass
class StepBatch:
    trajectories: list[Trajectory] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    engine_stats: dict[str, float] = field(default_factory=dict)
    reward_extra: dict[str, list[float]] = field(default_factory=dict)
    """Per-episode values of the reward's extra metrics, over every round of the step."""
    rounds: int = 0
    """Generation rounds played (more than one only with dynamic sampling)."""
    kept: list[int] = field(default_factory=list)
    """Indices of the episodes trained on, in play order."""
    trained_groups: int = 0
    informative_ids: set[str] = field(default_factory=set)
    """Group ids of the groups whose rewards differ (the only ones GRPO-style estimators
    learn from)."""
    filtered_groups: int = 0
    """Groups set aside by dynamic sampling for having no reward variance."""
    dropped_groups: int = 0
    """Groups left without a baseline by environment errors."""

    def add(
        self,
        trajectories: list[Trajectory],
        scores: list[float],
        engine_stats: dict[str, float],
        reward_extra: dict[str, list[float]],
    ) -> None:
        """Append one generation round (statistics and reward extras add up)."""
        self.trajectories += trajectories
        self.scores += scores
        for key, value in engine_stats.items():
            self.engine_stats[key] = self.engine_stats.get(key, 0.0) + value
        for key, values in reward_extra.items():
            self.reward_extra.setdefault(key, []).extend(values)

    def select(self, groups: list[list[int]], *, dropped: int, filtered: int) -> None:
        """Train on these groups."""
        self.kept = sorted(index for group in groups for index in group)
        self.trained_groups = len(groups)
        self.dropped_groups = dropped
        self.filtered_groups = filtered

    @property
    def informative_groups(self) -> int:
        return len(self.informative_ids)

    def success_mixed_share(self) -> float:
        """Share of the groups played whose episodes both succeed and fail. Reward variance
        can come from shaping alone (a format penalty): this says how many groups carry a
        signal about solving the task."""
        outcomes: dict[str, set[bool]] = {}
        for episode in self.trajectories:
            found = outcomes.setdefault(episode.group_id, set())
            if not episode.errored:
                found.add(bool(episode.success))
        return sum(len(seen) == 2 for seen in outcomes.values()) / max(len(outcomes), 1)
