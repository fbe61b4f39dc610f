"""Recipes are validated up front: errors name the key, the value and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from agenttrain.config import ConfigError, dump, load
from agenttrain.rl.config import TrainConfig

CONFIGS = Path(__file__).parents[2] / "configs"


@pytest.mark.parametrize("recipe", sorted(CONFIGS.glob("*_grpo.yaml")), ids=lambda p: p.name)
def test_shipped_recipes_validate(recipe):
    config = load(TrainConfig, recipe)
    assert config.model.path == "smollm2-135m"


def test_overrides_are_typed_from_yaml():
    config = load(
        TrainConfig,
        CONFIGS / "largest_grpo.yaml",
        [
            "algorithm.kl.coef=0.01",
            "trainer.total_steps=50",
            "model.lora.enabled=false",
            "env.servers=[http://a:1, http://b:2]",
        ],
    )
    assert config.algorithm.kl.coef == 0.01 and config.trainer.total_steps == 50
    assert config.model.lora.enabled is False
    assert config.env.servers == ["http://a:1", "http://b:2"]


@pytest.mark.parametrize(
    ("overrides", "fragments"),
    [
        (
            ["algorithm.kl.coeff=0.1"],
            ["unknown key 'algorithm.kl.coeff'", "did you mean 'coef'", "allowed in algorithm.kl:"],
        ),
        (["trainer.totl_steps=5"], ["unknown key 'trainer.totl_steps'", "total_steps"]),
        (
            ["algorithm.adv_estimator=ppo"],
            ["algorithm.adv_estimator", "'grpo'", "'rloo'", "(got 'ppo')"],
        ),
        (["algorithm.kl.type=k9"], ["algorithm.kl.type", "'low_var_kl'", "(got 'k9')"]),
        (["trainer.total_steps=lots"], ["trainer.total_steps", "(got 'lots')"]),
        (["actor.lr=-1"], ["actor.lr", "greater than 0", "(got -1)"]),
        (["trainer.total_steps"], ["not key=value"]),
        (["trainer=3"], ["trainer", "(got 3)"]),
        (["trainer.total_steps.x=3"], ["'trainer.total_steps' takes a value, not sub-keys"]),
        (["data.group_size=1"], ["adv_estimator=grpo", "cannot learn with data.group_size=1"]),
        (["actor.mini_batch_episodes=1000"], ["exceeds the 64 episodes of a step"]),
    ],
)
def test_bad_keys_and_values_are_named(overrides, fragments):
    with pytest.raises(ConfigError) as caught:
        load(TrainConfig, CONFIGS / "largest_grpo.yaml", overrides)
    for fragment in fragments:
        assert fragment in str(caught.value)


def test_unknown_keys_in_the_file_are_errors_too(tmp_path):
    recipe = tmp_path / "bad.yaml"
    recipe.write_text("actor:\n  learning_rate: 0.1\n")
    with pytest.raises(
        ConfigError, match=r"unknown key 'actor.learning_rate'.*allowed in actor: lr"
    ):
        load(TrainConfig, recipe)
    with pytest.raises(ConfigError, match="no such config file"):
        load(TrainConfig, tmp_path / "missing.yaml")


def test_the_resolved_config_round_trips(tmp_path):
    config = load(TrainConfig, CONFIGS / "largest_grpo.yaml", ["run.seed=7"])
    saved = tmp_path / "config.yaml"
    saved.write_text(dump(config))
    assert load(TrainConfig, saved) == config
