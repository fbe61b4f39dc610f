"""Steps and micro-batches: token budgets, seeded order, and packing equal to padding."""

from __future__ import annotations

import torch

from agenttrain.sft.batching import collate, micro_batches, plan_steps
from agenttrain.sft.loss import target_logprobs
from agenttrain.sft.tokenize import Example


def test_steps_follow_a_seeded_shuffle_within_the_token_budget():
    lengths = [100, 300, 250, 50, 400, 120, 80, 90]
    steps = plan_steps(lengths, epochs=1, batch_tokens=500, seed=3)
    assert sorted(i for step in steps for i in step) == list(range(8))  # each once
    assert all(sum(lengths[i] for i in step) <= 500 for step in steps)
    assert steps == plan_steps(lengths, epochs=1, batch_tokens=500, seed=3)
    assert steps != plan_steps(lengths, epochs=1, batch_tokens=500, seed=4)
    one_and_half = plan_steps(lengths, epochs=1.5, batch_tokens=500, seed=3)
    assert sum(len(step) for step in one_and_half) == 12


def test_an_example_over_budget_is_a_micro_batch_of_its_own():
    lengths = {0: 900, 1: 300, 2: 200, 3: 100}
    padded = micro_batches(lengths, budget=600, packing=False)
    assert padded == [[0], [1, 2], [3]]  # 2 rows padded to 300 = 600
    packed = micro_batches(lengths, budget=600, packing=True)
    assert packed == [[0], [1, 2, 3]]


def test_packed_and_padded_micro_batches_give_the_same_logprobs(tiny_model):
    torch.manual_seed(0)
    examples = []
    for size in (23, 9, 15):
        ids = torch.randint(5, 1000, (size,)).tolist()
        mask = [0] * (size // 2) + [1] * (size - size // 2)
        examples.append(Example(ids, mask, "test"))
    device = torch.device("cpu")
    values = {}
    for packing in (False, True):
        batch = collate(examples, packing, pad_id=0, device=device)
        assert batch.trained_tokens == sum(sum(e.mask[1:]) for e in examples)
        values[packing] = target_logprobs(tiny_model, batch)
    assert torch.allclose(values[False], values[True], atol=1e-5)
