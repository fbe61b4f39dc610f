"""Guided starts (`data.guided_start`, a reverse curriculum as in R3): groups begin part-way
along the oracle's solution, the oracle's turns are prompt, and the start fades over steps."""

from __future__ import annotations

import pytest

from agenttrain.config import ConfigError, load
from agenttrain.envs import get_spec
from agenttrain.rl.config import TrainConfig
from agenttrain.rl.curriculum import check_guided_start, guided_share
from agenttrain.rl.trainer import Trainer
from agenttrain.rollout.trajectory import read_jsonl
from rl.tiny_runs import RECIPE, recipe, train

GUIDED = ["data.guided_start.max_share=0.8", "data.guided_start.fade_steps=4"]


def test_each_group_draws_one_start_below_a_cap_that_fades_to_scratch():
    config = load(TrainConfig, RECIPE, GUIDED)
    first = [guided_share(config, 1, slot) for slot in range(200)]
    assert first == [guided_share(config, 1, slot) for slot in range(200)]  # one per group
    assert all(0 <= share < 0.8 for share in first) and len(set(first)) == 200
    assert max(first) > 0.7 and min(first) < 0.1  # uniform below the cap
    for slot in range(20):
        assert guided_share(config, 3, slot) == pytest.approx(first[slot] / 2)
        assert guided_share(config, 5, slot) == guided_share(config, 9, slot) == 0.0
    assert guided_share(load(TrainConfig, RECIPE), 1, 0) == 0.0  # off by default


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        (["data.guided_start.fade_steps=4"], "data.guided_start.fade_steps is set but"),
        (["data.guided_start.max_share=1"], "data.guided_start.max_share"),
    ],
)
def test_bad_guided_settings_are_named(overrides, fragment):
    with pytest.raises(ConfigError, match=fragment.replace(".", r"\.")):
        load(TrainConfig, RECIPE, overrides)


def test_a_guided_start_needs_an_oracle_and_an_episode_level_estimator():
    config = load(TrainConfig, RECIPE, GUIDED)
    check_guided_start(config, [get_spec("textcraft")])
    with pytest.raises(ConfigError, match="alfworld has no oracle"):
        check_guided_start(config, [get_spec("textcraft"), get_spec("alfworld")])
    gigpo = load(TrainConfig, RECIPE, [*GUIDED, "algorithm.adv_estimator=gigpo"])
    with pytest.raises(ConfigError, match="gigpo"):
        check_guided_start(gigpo, [get_spec("textcraft")])


def test_guided_groups_train_after_the_oracles_turns_and_leave_task_estimates_alone(
    tiny_model_dir, tmp_path
):
    config = recipe(
        tiny_model_dir,
        tmp_path / "run",
        "env.name=textcraft",
        "env.task_strata=[depth 3]",
        "rollout.action_format=react",
        "rollout.max_turns=12",
        "rollout.max_new_tokens=8",
        "rollout.max_context=2048",
        "data.guided_start.max_share=0.9",
        "trainer.total_steps=1",
        "trainer.test_freq=0",
    )
    [row] = train(config)
    episodes = list(read_jsonl(tmp_path / "run" / "trajectories" / "step-000001.jsonl"))
    guided = [t for t in episodes if t.guided_turns]
    assert guided and row["rollout/guided_turns"] > 0
    for episode in guided:
        assert episode.turns[0].action and episode.turns[0].token_span is None
        assert all(turn.token_span is not None for turn in episode.turns[episode.guided_turns :])
    unguided = [t for t in episodes if not t.guided_turns]
    stats = Trainer(config).task_stats  # as the checkpoint kept them
    assert sum(record.episodes for record in stats.records.values()) == len(unguided)
