"""`econ` and `econ_year` as a user drives them: observations, the -1 rule, months, eval."""

from __future__ import annotations

import asyncio
import json

import pytest
from typer.testing import CliRunner

from agenttrain.cli import app
from agenttrain.envs import get_spec, make_env
from agenttrain.envs.econ import best_decision, initial_household, score
from agenttrain.envs.econ.oracle import read_state

runner = CliRunner()


def play(env_name: str, task: int, replies: list[str], **kwargs):
    env = make_env(env_name, **kwargs)

    async def run():
        first = await env.reset(task)
        return first, [await env.step(reply) for reply in replies]

    return asyncio.run(run())


def test_splits_are_disjoint_and_shared_by_both_variants():
    splits = get_spec("econ").splits()
    assert {name: len(ids) for name, ids in splits.items()} == {
        "train": 1000,
        "val": 100,
        "test": 200,
    }
    assert not set(splits["train"]) & set(splits["test"])
    assert get_spec("econ_year").splits() == splits


def test_observation_shows_the_state_the_oracle_reads_back():
    first, _ = play("econ", 1100, [])
    assert first.text == play("econ", 1100, [])[0].text  # deterministic
    assert "- savings: " in first.text and '{"work"' in first.text
    shown, true = read_state(first.text), initial_household(1100)
    assert best_decision(shown) == best_decision(true)
    assert first.info["ground_truth"] == "1100"


def test_a_valid_decision_scores_the_model_and_a_broken_one_minus_one():
    _, (good,) = play("econ", 1100, ['{"work": 0.5, "consumption": 0.1}'])
    assert good.done and good.reward == pytest.approx(score(initial_household(1100), 0.5, 0.1))
    assert good.info["format_error"] is None
    _, (bad,) = play("econ", 1100, ['Here: {"work": 0.5, "consumption": 0.1}'])
    assert bad.done and bad.reward == -1.0
    assert bad.info["format_error"] == "text before the JSON object"
    assert "Invalid decision (text before the JSON object)" in bad.observation
    _, (lenient,) = play("econ", 1100, ['{"work": 2, "consumption": 0}'], format_penalty=-2.0)
    assert lenient.reward == -2.0


def test_a_year_is_twelve_months_whose_rewards_sum_to_the_mean_score():
    replies = ['{"work": 0.5, "consumption": 0.1}'] * 11 + ["{}"]
    first, steps = play("econ_year", 1100, replies)
    assert "(month 1 of 12)" in first.text
    assert [s.done for s in steps] == [False] * 11 + [True]
    assert "(month 2 of 12)" in steps[0].observation
    assert steps[-1].reward == pytest.approx(-1 / 12)
    assert all(0 < s.reward <= 1 / 12 for s in steps[:-1])
    assert get_spec("econ_year").episode_reward == "sum"


def test_a_broken_month_passes_with_no_work_and_no_spending():
    _, (broken,) = play("econ_year", 1100, ["work hard"])
    state = initial_household(1100)
    after = read_state(broken.observation)
    assert after.savings == pytest.approx(
        state.savings * (1 + state.interest) + state.transfer, 0.01
    )


@pytest.mark.parametrize(("env", "turns"), [("econ", "1.000"), ("econ_year", "12.000")])
def test_oracle_solves_test_tasks_through_agenttrain_eval(tmp_path, env, turns):
    result = runner.invoke(
        app,
        [
            "eval",
            "--env", env,
            "--split", "test",
            "--tasks", "0-3",
            "--model", "oracle",
            "--format", "raw",
            "--out", str(tmp_path),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    episodes = [json.loads(line) for line in (tmp_path / "oracle" / "episodes.jsonl").open()]
    assert len(episodes) == 4
    assert all(e["success"] and e["reward"] == pytest.approx(1.0) for e in episodes)
    assert all(e["num_turns"] == int(float(turns)) for e in episodes)
    assert {e["task_id"] for e in episodes} == set(get_spec(env).split("test")[:4])


def test_eval_applies_the_environments_own_format_without_a_flag(tmp_path):
    """Without `--format`, econ's strict JSON rule applies (react would score bad replies 0)."""
    result = runner.invoke(
        app,
        ["eval", "--env", "econ", "--split", "test", "--tasks", "0", "--model", "oracle",
         "--out", str(tmp_path)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    recorded = json.loads((tmp_path / "config.json").read_text())
    assert recorded["rollout"]["action_format"] == "raw"
