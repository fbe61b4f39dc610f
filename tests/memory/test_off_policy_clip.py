"""Episodes played with experience are trained as off-policy samples (issue 23, item 5).

Their actions came from mu(a | x + experience); training sees x alone. With the update's own
log-probs as the old ones, the ratio was exactly 1 in a one-epoch update and the off-policy
clip (`memory.off_clip_ratio_high`) never acted: gradients were bit-identical for any value.
"""

from __future__ import annotations

import torch

from agenttrain.rollout.trajectory import Trajectory
from rl.tiny_runs import update_gradient


def episode(row: int, experience: str | None, behaviour: float) -> Trajectory:
    """A two-group episode whose rollout log-probs are `behaviour` on every model token."""
    response = [100 + row, 200 + row, 300 + row, 2]
    return Trajectory(
        episode_id=f"e{row}",
        env="largest",
        task_id=row // 2,
        group_id=f"g{row // 2}",
        sample=row % 2,
        seed=0,
        model="tiny",
        prompt_ids=[1, 50 + row, 60 + row],
        response_ids=response,
        response_mask=[1] * len(response),
        logprobs=[behaviour] * len(response),
        experience=experience,
    )


def gradient_after_update(tiny_model, off_clip: float, guided: bool) -> torch.Tensor:
    overrides = [
        "memory.enabled=true",
        f"memory.off_clip_ratio_high={off_clip}",
        "algorithm.kl.use_kl_loss=false",
        "actor.entropy_coeff=0",
    ]
    # mu gave these actions far lower probability than pi does now: ratios well above 1 + clip
    episodes = [episode(row, "advice" if guided and row == 0 else None, -20.0) for row in range(4)]
    return update_gradient(tiny_model, overrides, episodes, [1.0, 0.0, 1.0, 0.0])[0]


def test_the_off_policy_clip_bounds_episodes_played_with_experience(tiny_model):
    tight = gradient_after_update(tiny_model, 0.28, guided=True)
    loose = gradient_after_update(tiny_model, 1e9, guided=True)
    assert not torch.equal(tight, loose)


def test_episodes_played_without_experience_are_unaffected(tiny_model):
    tight = gradient_after_update(tiny_model, 0.28, guided=False)
    loose = gradient_after_update(tiny_model, 1e9, guided=False)
    assert torch.equal(tight, loose)
