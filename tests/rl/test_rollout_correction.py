"""Truncated importance sampling (`algorithm.rollout_correction`): each token's policy-gradient
term weighed by min(pi_train / pi_rollout, threshold), as verl's rollout correction does."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from agenttrain.config import load
from agenttrain.rl.batch import collate
from agenttrain.rl.config import TrainConfig
from agenttrain.rl.kl import KLController
from agenttrain.rl.logprobs import response_logprobs
from agenttrain.rl.rollout_correction import importance_weights
from agenttrain.rl.update import PolicyUpdate
from rl.test_packing import episodes


def test_token_weights_are_the_ratio_truncated_at_the_threshold_and_zero_off_the_mask():
    train = torch.tensor([[0.0, 0.0, 0.0, 0.0]])
    rollout = torch.tensor([[0.0, -math.log(4), math.log(2), -5.0]])  # ratios 1, 4, 0.5, e^5
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    tis = importance_weights(train, rollout, mask, "token", 2.0)
    assert torch.allclose(tis.weights, torch.tensor([[1.0, 2.0, 0.5, 0.0]]))
    assert tis.mean == pytest.approx(3.5 / 3)
    assert tis.truncated == pytest.approx(1 / 3)


def test_a_sequence_weight_is_the_episodes_ratio_product_on_each_of_its_tokens():
    train = torch.zeros(2, 3)
    rollout = torch.tensor([[0.0, -math.log(1.5), 0.0], [math.log(2), math.log(2), 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    tis = importance_weights(train, rollout, mask, "sequence", 2.0)
    assert torch.allclose(tis.weights, torch.tensor([[1.5, 1.5, 0.0], [0.25, 0.25, 0.25]]))
    assert tis.truncated == 0.0


def gradient(tiny_model, shift: float, level: str | None) -> tuple[torch.Tensor, dict]:
    """The policy gradient of one update whose rollout log-probs are the model's own + shift."""
    settings = ["model.path=tiny", "data.batch_tasks=2", "data.group_size=2"]
    settings += ["model.train_dtype=float32", "sampling.temperature=0.7"]
    settings.append("actor.grad_clip=1e9")  # compare raw gradients, not clipped ones
    if level is not None:
        settings.append(f"algorithm.rollout_correction.level={level}")
    config = load(TrainConfig, None, settings)
    played = episodes()
    with torch.no_grad():
        own, _ = response_logprobs(tiny_model, collate(played, 0, torch.device("cpu")), 0.7)
    for row, episode in enumerate(played):
        episode.logprobs = (own[row, : len(episode.response_ids)] + shift).tolist()
    model = copy.deepcopy(tiny_model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    update = PolicyUpdate(config, model, None, optimizer, KLController(0.0), 0, torch.device("cpu"))
    metrics = update.learn(played, [1.0, 0.0, 1.0, 0.0], {})
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return grads, metrics


def test_tokens_the_rollout_found_less_likely_count_more_up_to_the_threshold(tiny_model):
    plain, _ = gradient(tiny_model, 0.0, None)
    assert plain.abs().sum() > 0
    # every ratio 4: truncated to 2, so the gradient doubles
    doubled, metrics = gradient(tiny_model, -math.log(4), "token")
    assert torch.allclose(doubled, 2 * plain, atol=1e-6, rtol=1e-4)
    assert metrics["training/rollout_is_truncated"] == pytest.approx(1.0)
    assert metrics["training/rollout_is_weight_mean"] == pytest.approx(2.0, rel=1e-4)
    # every ratio 1/2: under the threshold, kept as it is
    halved, metrics = gradient(tiny_model, math.log(2), "token")
    assert torch.allclose(halved, 0.5 * plain, atol=1e-6, rtol=1e-4)
    assert metrics["training/rollout_is_truncated"] == 0.0


def test_without_a_gap_the_correction_changes_nothing_and_off_it_reports_nothing(tiny_model):
    plain, metrics = gradient(tiny_model, 0.0, None)
    assert "training/rollout_is_weight_mean" not in metrics
    corrected, metrics = gradient(tiny_model, 0.0, "sequence")
    assert torch.allclose(corrected, plain, atol=1e-6, rtol=1e-4)
    assert metrics["training/rollout_is_weight_mean"] == pytest.approx(1.0, abs=1e-4)
