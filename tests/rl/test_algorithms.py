"""Advantage estimators, policy loss, aggregation and KL against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from agenttrain.rl.advantages import ESTIMATORS, get_estimator, masked_whiten
from agenttrain.rl.kl import KLController, kl_penalty
from agenttrain.rl.losses import Totals, agg_loss, entropy_from_logits, ppo_clip_loss


def outcome(scores, width=3, last=None):
    """Token rewards with each score on the last model token; mask [1, 1, 0] by default."""
    mask = torch.tensor([[1.0, 1.0, 0.0]] * len(scores))[:, :width]
    rewards = torch.zeros(len(scores), width)
    for row, score in enumerate(scores):
        rewards[row, (last or 2) - 1] = score
    return rewards, mask


def test_grpo_of_a_one_zero_group_is_plus_minus_0_7071():
    rewards, mask = outcome([1.0, 0.0])
    advantages = get_estimator("grpo")(rewards, mask, ["g", "g"])
    assert advantages[0, 0].item() == pytest.approx(1 / math.sqrt(2), abs=1e-4)
    assert advantages[1, 1].item() == pytest.approx(-1 / math.sqrt(2), abs=1e-4)
    assert advantages[:, 2].abs().sum() == 0  # nothing where the mask is 0


def test_grpo_groups_are_separate_and_degenerate_groups_behave_like_verl():
    rewards, mask = outcome([1.0, 1.0, 0.5, 2.0])
    advantages = get_estimator("grpo")(rewards, mask, ["a", "a", "b", "c"])
    assert advantages[0, 0] == 0 and advantages[1, 0] == 0  # all equal: no signal
    assert advantages[2, 0].item() == pytest.approx(0.5)  # a group of one: mean 0, std 1
    assert advantages[3, 0].item() == pytest.approx(2.0)


def test_dr_grpo_does_not_divide_by_the_std():
    rewards, mask = outcome([1.0, 0.0, 0.0, 0.0])
    advantages = get_estimator("grpo")(rewards, mask, ["g"] * 4, norm_by_std=False)
    assert advantages[:, 0].tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25])


def test_rloo_compares_each_sample_with_the_others():
    rewards, mask = outcome([1.0, 0.0, 0.0])
    advantages = get_estimator("rloo")(rewards, mask, ["g"] * 3)
    assert advantages[:, 0].tolist() == pytest.approx([1.0, -0.5, -0.5])


def test_reinforce_plus_plus_can_restart_the_return_at_environment_tokens():
    # verl 0.7.1's form. Two turns: model tokens 0 and 2-3, environment token 1; the outcome
    # sits on token 3.
    rewards = torch.tensor([[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 0.0, 1.0, 1.0], [1.0, 0.0, 1.0, 1.0]])
    advantages = get_estimator("reinforce_plus_plus")(
        rewards, mask, ["a", "b"], gamma=1.0, env_tokens="restart"
    )
    # By hand: returns on model tokens are [0, ., 1, 1] and [0, ., 0, 0]; whitened over the
    # six model tokens (mean 1/3, unbiased std sqrt(4/15)).
    returns = torch.tensor([0.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    expected = (returns - returns.mean()) / returns.std()
    assert torch.allclose(advantages[mask.bool()], expected, atol=1e-5)
    assert advantages[0, 0] < 0 < advantages[0, 2]  # the first turn does not get the outcome


def test_reinforce_plus_plus_carries_the_return_across_environment_tokens_as_verl():
    # verl 0.9.1's form (the default): γ discounts per model token, not per environment token.
    rewards = torch.tensor([[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 0.0, 1.0, 1.0], [1.0, 0.0, 1.0, 1.0]])
    advantages = get_estimator("reinforce_plus_plus")(rewards, mask, ["a", "b"], gamma=0.5)
    # By hand: returns on model tokens 0, 2, 3 of episode 1 are 0.25, 0.5, 1 (the environment
    # token does not discount); episode 2 all 0.
    returns = torch.tensor([0.25, 0.5, 1.0, 0.0, 0.0, 0.0])
    expected = (returns - returns.mean()) / returns.std()
    assert torch.allclose(advantages[mask.bool()], expected, atol=1e-5)
    assert advantages[:, 1].abs().sum() == 0


def test_reinforce_plus_plus_baseline_treats_a_group_of_one_as_mean_zero():
    rewards, mask = outcome([1.0, 0.0, 1.0])
    advantages = get_estimator("reinforce_plus_plus_baseline")(rewards, mask, ["a", "a", "b"])
    # Centred scores [0.5, -0.5, 1.0] (group b alone keeps its score) on each row's two model
    # tokens, then whitened over those six tokens.
    centred = torch.tensor([0.5, -0.5, 1.0]).repeat_interleave(2)
    expected = (centred - centred.mean()) / centred.std()
    assert torch.allclose(advantages[mask.bool()], expected, atol=1e-5)


def test_whitening_one_or_no_token_stays_finite():
    values = torch.tensor([[3.0, 5.0]])
    assert torch.equal(masked_whiten(values, torch.tensor([[1.0, 0.0]]))[0, 0], torch.tensor(0.0))
    assert torch.isfinite(masked_whiten(values, torch.zeros(1, 2))).all()
    rewards, mask = outcome([1.0])
    advantages = get_estimator("reinforce_plus_plus")(rewards, mask, ["a"])
    assert torch.isfinite(advantages).all()


def test_reinforce_plus_plus_baseline_is_centred_per_group_then_whitened():
    rewards, mask = outcome([1.0, 0.0, 1.0, 1.0])
    advantages = get_estimator("reinforce_plus_plus_baseline")(rewards, mask, ["a", "a", "b", "b"])
    assert advantages[2, 0] == advantages[3, 0] == 0  # a group with equal rewards
    assert advantages[0, 0] > 0 > advantages[1, 0]


def test_every_registered_estimator_is_zero_under_mask_zero():
    rewards, mask = outcome([1.0, 0.0, 0.5, 0.2])
    for name, estimator in ESTIMATORS.items():
        advantages = estimator(rewards, mask, ["a", "a", "b", "b"])
        assert advantages[:, 2].abs().sum() == 0, name


def test_loss_aggregation_modes():
    loss = torch.tensor([[1.0, 2.0, 9.0], [3.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    totals = Totals(tokens=3, sequences=2, loss_scale_factor=4)
    assert agg_loss(loss, mask, "token-mean", totals).item() == pytest.approx(6 / 3)
    assert agg_loss(loss, mask, "seq-mean-token-sum", totals).item() == pytest.approx((3 + 3) / 2)
    assert agg_loss(loss, mask, "seq-mean-token-mean", totals).item() == pytest.approx(
        (1.5 + 3) / 2
    )
    assert agg_loss(loss, mask, "seq-mean-token-sum-norm", totals).item() == pytest.approx(3 / 4)
    with pytest.raises(ValueError, match="token-mean"):
        agg_loss(loss, mask, "mean", totals)


def test_ppo_clip_loss_clips_and_dual_clips():
    mask = torch.ones(1, 4)
    totals = Totals(tokens=4, sequences=1)
    # ratios e^0=1, e^0.5≈1.65 (above 1+0.2), e^-0.5≈0.61 (below 1-0.2), e^2≈7.39
    logp = torch.tensor([[0.0, 0.5, -0.5, 2.0]])
    old = torch.zeros(1, 4)
    positive = ppo_clip_loss(
        logp,
        old,
        torch.ones(1, 4),
        mask,
        clip_low=0.2,
        clip_high=0.2,
        clip_c=3.0,
        agg_mode="token-mean",
        totals=totals,
    )
    # A>0: max(-r, -clip(r)) = -min(r, clip(r)) -> [-1, -1.2, -0.607, -1.2]
    expected = (-1 - 1.2 - math.exp(-0.5) - 1.2) / 4
    assert positive.loss.item() == pytest.approx(expected, abs=1e-4)
    assert positive.clipfrac.item() == pytest.approx(0.5)  # the two ratios above 1.2
    negative = ppo_clip_loss(
        logp,
        old,
        -torch.ones(1, 4),
        mask,
        clip_low=0.2,
        clip_high=0.2,
        clip_c=3.0,
        agg_mode="token-mean",
        totals=totals,
    )
    # A<0: max(r, clip(r)) then min(., 3) -> [1, 1.649, 0.8, 3.0 (dual-clip of 7.39)]
    assert negative.loss.item() == pytest.approx((1 + math.exp(0.5) + 0.8 + 3.0) / 4, abs=1e-4)
    assert negative.clipfrac_lower.item() == pytest.approx(0.25)


def test_clip_higher_lets_positive_advantages_grow_further():
    logp, old, mask = torch.tensor([[0.2]]), torch.zeros(1, 1), torch.ones(1, 1)
    totals = Totals(tokens=1, sequences=1)
    symmetric = ppo_clip_loss(
        logp,
        old,
        torch.ones(1, 1),
        mask,
        clip_low=0.2,
        clip_high=0.2,
        clip_c=3.0,
        agg_mode="token-mean",
        totals=totals,
    )
    higher = ppo_clip_loss(
        logp,
        old,
        torch.ones(1, 1),
        mask,
        clip_low=0.2,
        clip_high=0.28,
        clip_c=3.0,
        agg_mode="token-mean",
        totals=totals,
    )
    assert symmetric.loss.item() == pytest.approx(-1.2)
    assert higher.loss.item() == pytest.approx(-math.exp(0.2), abs=1e-5)


def test_masked_tokens_carry_no_loss_and_no_gradient():
    logp = torch.tensor([[0.1, -0.3, 5.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    result = ppo_clip_loss(
        logp,
        torch.zeros(1, 3),
        torch.ones(1, 3),
        mask,
        clip_low=0.2,
        clip_high=0.2,
        clip_c=3.0,
        agg_mode="token-mean",
        totals=Totals(tokens=2, sequences=1),
    )
    result.loss.backward()
    assert logp.grad[0, 2] == 0


def test_kl_estimators_match_verl_values():
    logp = torch.tensor([0.5, -1.0])
    ref = torch.zeros(2)
    assert kl_penalty(logp, ref, "k1").tolist() == pytest.approx([0.5, -1.0])
    assert kl_penalty(logp, ref, "k2").tolist() == pytest.approx([0.125, 0.5])
    assert kl_penalty(logp, ref, "low_var_kl").tolist() == pytest.approx([0.1065, 0.7183], abs=1e-4)
    assert kl_penalty(logp, ref, "abs").tolist() == pytest.approx([0.5, 1.0])
    assert kl_penalty(ref, ref, "k3").abs().sum() == 0  # KL is zero when nothing moved


def test_straight_through_kl_keeps_the_value_with_k2_gradients():
    logp = torch.tensor([0.5, -1.0], requires_grad=True)
    value = kl_penalty(logp, torch.zeros(2), "k3+")
    assert value.tolist() == pytest.approx([0.1065, 0.7183], abs=1e-4)
    value.sum().backward()
    assert logp.grad.tolist() == pytest.approx([0.5, -1.0])  # d/dx ½x² = x


def test_adaptive_kl_coefficient_moves_towards_the_target():
    controller = KLController(0.1, adaptive=True, target=1.0, horizon=10)
    controller.update(current_kl=2.0, steps=10)
    assert controller.value == pytest.approx(0.1 * 1.2)
    fixed = KLController(0.1)
    fixed.update(current_kl=50.0, steps=10)
    assert fixed.value == 0.1


def test_entropy_from_logits():
    uniform = torch.zeros(1, 8)
    assert entropy_from_logits(uniform).item() == pytest.approx(math.log(8))
    certain = torch.tensor([[100.0, 0.0, 0.0]])
    assert entropy_from_logits(certain).item() == pytest.approx(0.0, abs=1e-6)
