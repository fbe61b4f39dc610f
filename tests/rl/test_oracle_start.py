"""Oracle starts (`data.oracle_start`, a reverse curriculum as in R3): groups begin part-way
along the oracle's solution, the oracle's turns are prompt, and the start fades over steps."""

from __future__ import annotations

import pytest

from agenttrain.config import ConfigError, load
from agenttrain.envs import get_spec
from agenttrain.rl.config import TrainConfig
from agenttrain.rl.curriculum import check_oracle_start, oracle_share
from agenttrain.rl.trainer import Trainer
from agenttrain.rollout.trajectory import read_jsonl
from rl.tiny_runs import RECIPE, deep_textcraft_step, train

GUIDED = ["data.oracle_start.max_share=0.8", "data.oracle_start.fade_steps=4"]


def test_each_group_draws_one_start_below_a_cap_that_fades_to_scratch():
    config = load(TrainConfig, RECIPE, GUIDED)
    first = [oracle_share(config, 1, slot) for slot in range(200)]
    assert first == [oracle_share(config, 1, slot) for slot in range(200)]  # one per group
    assert all(0 <= share < 0.8 for share in first) and len(set(first)) == 200
    assert max(first) > 0.7 and min(first) < 0.1  # uniform below the cap
    for slot in range(20):
        assert oracle_share(config, 3, slot) == pytest.approx(first[slot] / 2)
        assert oracle_share(config, 5, slot) == oracle_share(config, 9, slot) == 0.0
    assert oracle_share(load(TrainConfig, RECIPE), 1, 0) == 0.0  # off by default


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        (["data.oracle_start.fade_steps=4"], "data.oracle_start.fade_steps is set but"),
        (["data.oracle_start.max_share=1"], "data.oracle_start.max_share"),
    ],
)
def test_bad_oracle_start_settings_are_named(overrides, fragment):
    with pytest.raises(ConfigError, match=fragment.replace(".", r"\.")):
        load(TrainConfig, RECIPE, overrides)


def test_a_oracle_start_needs_an_oracle_and_an_episode_level_estimator():
    config = load(TrainConfig, RECIPE, GUIDED)
    check_oracle_start(config, [get_spec("textcraft")])
    with pytest.raises(ConfigError, match="alfworld has no oracle"):
        check_oracle_start(config, [get_spec("textcraft"), get_spec("alfworld")])
    gigpo = load(TrainConfig, RECIPE, [*GUIDED, "algorithm.adv_estimator=gigpo"])
    with pytest.raises(ConfigError, match="gigpo"):
        check_oracle_start(gigpo, [get_spec("textcraft")])


def test_oracle_started_groups_train_after_the_oracles_turns_and_leave_task_estimates_alone(
    tiny_model_dir, tmp_path
):
    config = deep_textcraft_step(
        tiny_model_dir,
        tmp_path / "run",
        "rollout.max_turns=12",
        "rollout.max_new_tokens=8",
        "rollout.max_context=2048",
        "data.oracle_start.max_share=0.9",
    )
    [row] = train(config)
    episodes = list(read_jsonl(tmp_path / "run" / "trajectories" / "step-000001.jsonl"))
    guided = [t for t in episodes if t.oracle_turns]
    assert guided and row["rollout/oracle_turns"] > 0
    for episode in guided:
        assert episode.turns[0].action and episode.turns[0].token_span is None
        assert all(turn.token_span is not None for turn in episode.turns[episode.oracle_turns :])
    unguided = [t for t in episodes if not t.oracle_turns]
    stats = Trainer(config).task_stats  # as the checkpoint kept them
    assert sum(record.episodes for record in stats.records.values()) == len(unguided)
