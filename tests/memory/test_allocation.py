"""Rollout modes: which samples of a group are played with experience."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agenttrain.memory.config import MemoryConfig
from agenttrain.rl.config import TrainConfig


@pytest.mark.parametrize(("size", "ratio"), [(8, 0.5), (4, 0.25), (6, 1 / 3), (5, 0.5), (8, 0.0)])
def test_mixed_mode_gives_each_group_exactly_its_share(size, ratio):
    config = MemoryConfig(enabled=True, rollout_mode="mixed", rollout_ratio=ratio)
    chosen = [config.guided_samples(size, seed) for seed in range(200)]
    assert {len(samples) for samples in chosen} == {round(size * ratio)}
    assert all(samples <= set(range(size)) for samples in chosen)
    if 0 < ratio < 1:
        assert len({frozenset(samples) for samples in chosen}) > 1  # positions vary by group


def test_a_config_without_memory_is_valid():
    """List-valued settings (seed_from) at their default are not 'set'."""
    assert MemoryConfig().seed_from == [] and not MemoryConfig().enabled


def test_all_and_woexp_modes():
    assert MemoryConfig(enabled=True, rollout_mode="all").guided_samples(4, 0) == {0, 1, 2, 3}
    assert MemoryConfig(enabled=True, rollout_mode="woexp").guided_samples(4, 0) == set()
    assert MemoryConfig().guided_samples(4, 0) == set()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"memory": {"top_k": 2}}, "memory.top_k is set but memory.enabled is false"),
        (
            {"memory": {"seed_from": ["demos.jsonl"]}},
            "memory.seed_from is set but memory.enabled is false",
        ),
        (
            {"memory": {"enabled": True, "rollout_mode": "all", "rollout_ratio": 0.3}},
            "memory.rollout_ratio applies to memory.rollout_mode=mixed only",
        ),
        ({"memory": {"enabled": True, "summarizer": "gpt-4"}}, "use 'rules' or 'openai:<model>'"),
        ({"memory": {"enabled": True, "rollout_ratio": 1.5}}, "less than or equal to 1"),
        ({"memory": {"enabled": True, "rollout_mode": "some"}}, "'woexp', 'all' or 'mixed'"),
        (
            {"memory": {"enabled": True}, "env": {"split": "val"}},
            "only train-split episodes may enter the experience pool",
        ),
    ],
)
def test_bad_memory_settings_are_clear_errors(overrides, message):
    with pytest.raises(ValidationError, match=message):
        TrainConfig(**overrides)
