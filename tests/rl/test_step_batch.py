"""What a step's batch reports about where its signal came from."""

from __future__ import annotations

from agenttrain.rl.step_batch import StepBatch
from agenttrain.rollout.trajectory import Trajectory


def episode(group: str, success: bool, finish: str = "done") -> Trajectory:
    return Trajectory(
        episode_id=f"{group}-{success}",
        env="textcraft",
        task_id=0,
        group_id=group,
        sample=0,
        seed=0,
        model="m",
        success=success,
        finish_reason=finish,
    )


def test_the_success_mixed_share_counts_groups_with_a_success_and_a_failure():
    """Groups whose rewards differ only by a shaping penalty are not counted; an errored
    episode's missing outcome is not a failure; every played group is in the denominator."""
    batch = StepBatch()
    batch.trajectories = [
        episode("a", True),
        episode("a", False),  # mixed
        episode("b", False),
        episode("b", False),  # all failed (a format penalty may still split them)
        episode("c", True),
        episode("c", False, finish="env_error"),  # one scored outcome only
        episode("d", True),
        episode("d", True),
    ]
    assert batch.success_mixed_share() == 1 / 4
    assert StepBatch().success_mixed_share() == 0.0
