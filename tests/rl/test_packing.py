"""Packed micro-batches (`actor.packing`): episodes end to end in one row, no padding, give the
update exactly what padded rows give (issue 22, the GPU update path)."""

from __future__ import annotations

import copy
import random

import pytest
import torch

from agenttrain.rl.batch import collate
from agenttrain.rl.logprobs import response_logprobs
from agenttrain.rollout.trajectory import Trajectory
from rl.tiny_runs import update_gradient


def episodes(count: int = 4) -> list[Trajectory]:
    """Multi-turn-shaped episodes of different lengths: model tokens and environment text."""
    draw = random.Random(0)
    made = []
    for row in range(count):
        prompt = [draw.randrange(3, 5000) for _ in range(5 + 3 * row)]
        response = [draw.randrange(3, 5000) for _ in range(9 - row)]
        mask = [1, 1, 1, 0, 0, 1, 1, 1, 1][: len(response)]  # an environment reply inside
        made.append(
            Trajectory(
                episode_id=f"e{row}",
                env="largest",
                task_id=row // 2,
                group_id=f"g{row // 2}",
                sample=row % 2,
                seed=0,
                model="tiny",
                prompt_ids=prompt,
                response_ids=response,
                response_mask=mask,
                logprobs=[-1.0] * len(response),
            )
        )
    return made


def test_packed_episodes_give_the_log_probs_and_entropies_of_padded_rows(tiny_model):
    played = episodes()
    padded = collate(played, 0, torch.device("cpu"))
    packed = collate(played, 0, torch.device("cpu"), packing=True)
    assert packed.input_ids.shape == (1, sum(len(t.prompt_ids + t.response_ids) for t in played))
    with torch.no_grad():
        expected, expected_entropy = response_logprobs(tiny_model, padded, 0.7, True)
        got, entropy = response_logprobs(tiny_model, packed, 0.7, True)
    assert torch.allclose(got, expected, atol=1e-5)
    assert torch.allclose(entropy, expected_entropy, atol=1e-5)
    # and the episodes did not see each other: the last one alone gives the same numbers
    with torch.no_grad():
        alone, _ = response_logprobs(tiny_model, collate(played[-1:], 0, torch.device("cpu")), 0.7)
    width = len(played[-1].response_ids)
    assert torch.allclose(got[-1, :width], alone[0, :width], atol=1e-5)


@pytest.mark.parametrize("kl_loss", [False, True])
def test_an_update_on_packed_micro_batches_takes_the_gradient_of_padded_ones(tiny_model, kl_loss):
    def gradient(packing: bool) -> torch.Tensor:
        overrides = [
            f"actor.packing={str(packing).lower()}",
            "actor.micro_batch_tokens=64",  # two micro-batches of two episodes
            # fp32: under bf16 autocast (the default on a CPU with native bf16) the two
            # layouts round differently, ~1e-4 of the gradient's norm
            "model.train_dtype=float32",
            f"algorithm.kl.use_kl_loss={str(kl_loss).lower()}",
        ]
        reference = copy.deepcopy(tiny_model) if kl_loss else None
        grad, metrics = update_gradient(
            tiny_model, overrides, episodes(), [1.0, 0.0, 1.0, 0.0], reference=reference
        )
        assert metrics["actor/pg_loss"] != 0
        return grad

    assert torch.allclose(gradient(True), gradient(False), atol=1e-6, rtol=1e-4)


def test_a_metric_entropy_is_the_same_value_without_a_graph_and_a_loss_entropy_has_one(
    tiny_model,
):
    batch = collate(episodes(), 0, torch.device("cpu"))
    logprobs, metric = response_logprobs(tiny_model, batch, 0.7, True, entropy_grad=False)
    _, loss_term = response_logprobs(tiny_model, batch, 0.7, True)
    assert logprobs.requires_grad  # the policy loss still trains
    assert not metric.requires_grad  # its softmax over the vocabulary is not kept for backward
    assert loss_term.requires_grad  # an entropy bonus still gets its gradient
    assert torch.equal(metric, loss_term.detach())
