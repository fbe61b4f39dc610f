"""Training logs how often episodes used each kind of action, so a policy that stops
crafting to dodge a penalty shows in the curves, not only in the saved trajectories."""

from __future__ import annotations

import pytest

from agenttrain.rl.trainer import Trainer
from rl.test_progress_reward import cut_oracle_episodes, replayed
from rl.tiny_runs import recipe


def test_a_step_logs_each_textcraft_verb_per_episode(tiny_model_dir, tmp_path):
    """Real TextCraft play: the oracle's episodes and one that only fetches; the crafts per
    episode are the oracle's crafts over both, and the fetch-only episode counts its gets."""
    oracle = cut_oracle_episodes(tmp_path / "oracle", max_turns=30)[0]
    fetch_only = replayed(oracle, ["get 2 dirt", "get 2 dirt", "inventory"])
    episodes = [oracle, fetch_only]
    config = recipe(tiny_model_dir, tmp_path / "run", "env.name=textcraft")
    trainer = Trainer(config)
    metrics = trainer._rollout_metrics(episodes, [1.0, 0.0], {}, 30)
    actions = [turn.action.split()[0] for turn in oracle.turns]
    assert actions.count("craft") > 0
    assert metrics["rollout/actions/craft"] == pytest.approx(actions.count("craft") / 2)
    assert metrics["rollout/actions/get"] == pytest.approx((actions.count("get") + 2) / 2)
    assert metrics["rollout/actions/inventory"] == pytest.approx(
        (actions.count("inventory") + 1) / 2
    )
    only_fetching = trainer._rollout_metrics([fetch_only], [0.0], {}, 30)
    assert only_fetching["rollout/actions/craft"] == 0.0
    # replies the token limit cut off, as a share of turns
    assert metrics["env/cut_off_rate"] == 0.0
    fetch_only.turns[0].cut_off = True
    cut = trainer._rollout_metrics(episodes, [1.0, 0.0], {}, 30)
    turns = sum(len(episode.turns) for episode in episodes)
    assert cut["env/cut_off_rate"] == pytest.approx(1 / turns)


def test_an_environment_without_verbs_logs_no_action_counts(tiny_model_dir, tmp_path):
    """Largest Number declares no verbs: no `rollout/actions/*` keys, not zeros."""
    oracle = cut_oracle_episodes(tmp_path / "oracle", max_turns=3)[0]
    oracle.env = "largest"
    trainer = Trainer(recipe(tiny_model_dir, tmp_path / "run"))
    metrics = trainer._rollout_metrics([oracle], [0.0], {}, 3)
    assert not [key for key in metrics if key.startswith("rollout/actions/")]
