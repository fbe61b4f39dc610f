"""Our advantage estimators, KL estimators, loss aggregation and PPO loss equal verl 0.9.1's
`core_algos` on the same tensors, for every option we offer (so a recipe means the same thing
here and on a verl cluster)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("verl", reason="agenttrain[verl] not installed (make setup installs it)")

from omegaconf import OmegaConf
from verl.trainer.ppo import core_algos

from agenttrain.rl.advantages import get_estimator
from agenttrain.rl.kl import KL_TYPES, kl_penalty
from agenttrain.rl.losses import AGG_MODES, Totals, agg_loss, ppo_clip_loss


def multi_turn_batch(seed: int = 0):
    """12 episodes of 3 turns (model spans separated by environment spans, then padding),
    outcome rewards on each episode's last model token, groups of 4, 3, 2, 2 and 1."""
    generator = torch.Generator().manual_seed(seed)
    rows, width = 12, 30
    mask = torch.zeros(rows, width)
    rewards = torch.zeros(rows, width)
    for row in range(rows):
        position = 0
        for _ in range(3):
            model = int(torch.randint(2, 5, (1,), generator=generator))
            mask[row, position : position + model] = 1
            position += model + int(torch.randint(1, 4, (1,), generator=generator))
        last = int(mask[row].nonzero()[-1])
        rewards[row, last] = float(torch.randint(0, 3, (1,), generator=generator)) / 2
    groups = ["a"] * 4 + ["b"] * 3 + ["c"] * 2 + ["d"] * 2 + ["e"]
    return rewards, mask, groups


def algo_config(**values):
    return OmegaConf.create({"gamma": 1.0, "lam": 1.0, **values})


@pytest.mark.parametrize(
    ("ours", "theirs", "kwargs"),
    [
        ("grpo", "grpo", {"norm_by_std": True}),
        ("grpo", "grpo", {"norm_by_std": False}),
        ("rloo", "rloo", {}),
        ("reinforce_plus_plus", "reinforce_plus_plus", {"gamma": 1.0}),
        ("reinforce_plus_plus", "reinforce_plus_plus", {"gamma": 0.9}),
        ("reinforce_plus_plus_baseline", "reinforce_plus_plus_baseline", {}),
    ],
)
def test_advantages_equal_verls(ours, theirs, kwargs):
    rewards, mask, groups = multi_turn_batch()
    mine = get_estimator(ours)(rewards, mask, groups, epsilon=1e-6, **kwargs)
    verl_fn = core_algos.get_adv_estimator_fn(theirs)
    index = np.array(groups, dtype=object)
    if theirs == "grpo":
        expected, _ = verl_fn(
            rewards, mask, index, epsilon=1e-6, norm_adv_by_std_in_grpo=kwargs["norm_by_std"]
        )
    elif theirs == "reinforce_plus_plus":
        expected, _ = verl_fn(rewards, mask, config=algo_config(gamma=kwargs["gamma"]))
    else:
        expected, _ = verl_fn(rewards, mask, index, epsilon=1e-6, config=algo_config())
    assert torch.allclose(mine, expected, atol=1e-5), (ours, kwargs)


@pytest.mark.parametrize("kind", KL_TYPES)
def test_kl_estimators_equal_verls_in_value_and_gradient(kind):
    generator = torch.Generator().manual_seed(1)
    logprobs = (-torch.rand(4, 7, generator=generator) * 3).requires_grad_()
    reference = -torch.rand(4, 7, generator=generator) * 3
    mine = kl_penalty(logprobs, reference, kind)
    (mine_grad,) = torch.autograd.grad(mine.sum(), logprobs)
    theirs = core_algos.kl_penalty(logprobs, reference, kind)
    (their_grad,) = torch.autograd.grad(theirs.sum(), logprobs)
    assert torch.allclose(mine, theirs, atol=1e-6)
    assert torch.allclose(mine_grad, their_grad, atol=1e-6)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_loss_aggregation_equals_verls(mode):
    _, mask, _ = multi_turn_batch()
    mask[3] = 0  # a fully masked sequence (an env-error episode) is excluded by both
    loss = torch.randn(*mask.shape, generator=torch.Generator().manual_seed(2))
    totals = Totals(
        tokens=int(mask.sum()), sequences=int((mask.sum(-1) > 0).sum()), loss_scale_factor=512
    )
    mine = agg_loss(loss, mask, mode, totals)
    theirs = core_algos.agg_loss(loss, mask, mode, loss_scale_factor=512)
    assert torch.allclose(mine, theirs, atol=1e-6), mode


class ActorConfig(dict):
    """The attributes verl's vanilla policy loss reads from its ActorConfig."""

    def __getattr__(self, name):
        return self[name]


@pytest.mark.parametrize("mode", AGG_MODES)
def test_ppo_clip_loss_equals_verls_vanilla_policy_loss(mode):
    _, mask, _ = multi_turn_batch()
    generator = torch.Generator().manual_seed(3)
    old = -torch.rand(*mask.shape, generator=generator) * 2
    new = old + torch.randn(*mask.shape, generator=generator) * 0.4  # some ratios get clipped
    advantages = torch.randn(*mask.shape, generator=generator) * mask
    config = ActorConfig(
        clip_ratio=0.2,
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        clip_ratio_c=3.0,
        global_batch_info={"loss_scale_factor": 512},
    )
    theirs, metrics = core_algos.compute_policy_loss_vanilla(
        old, new, advantages, mask, loss_agg_mode=mode, config=config
    )
    totals = Totals(
        tokens=int(mask.sum()), sequences=int((mask.sum(-1) > 0).sum()), loss_scale_factor=512
    )
    mine = ppo_clip_loss(
        new,
        old,
        advantages,
        mask,
        clip_low=0.2,
        clip_high=0.28,
        clip_c=3.0,
        agg_mode=mode,
        totals=totals,
    )
    assert torch.allclose(mine.loss, theirs, atol=1e-6), mode
    assert float(mine.clipfrac) == pytest.approx(metrics["actor/pg_clipfrac"], abs=1e-6)
    assert float(mine.clipfrac_lower) == pytest.approx(metrics["actor/pg_clipfrac_lower"], abs=1e-6)
    assert float(mine.ppo_kl) == pytest.approx(metrics["actor/ppo_kl"], abs=1e-6)
