"""Reward files with verl's signature: the econ example, and loader errors that name the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agenttrain.cli import app
from agenttrain.envs.econ import initial_household, score
from agenttrain.rl.rewards import RewardFunctionError, load_reward_function, score_episode
from agenttrain.rollout.trajectory import Trajectory

EXAMPLE = Path(__file__).parents[2] / "examples" / "rewards" / "econ_reward.py"
runner = CliRunner()


def oracle_trajectories(tmp_path: Path, env: str) -> list[Trajectory]:
    out = tmp_path / env
    result = runner.invoke(
        app,
        ["eval", "--env", env, "--split", "train", "--tasks", "0-1", "--model", "oracle",
         "--format", "raw", "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = (out / "oracle" / "episodes.jsonl").read_text().splitlines()
    return [Trajectory.from_dict(json.loads(line)) for line in lines]


def test_example_applies_the_seeds_rule_to_a_single_decision():
    compute_score = load_reward_function(EXAMPLE, "compute_score")
    state = initial_household(5)
    reply = '{"work": 0.4, "consumption": 0.12}'
    assert compute_score(
        data_source="econ", solution_str=reply, ground_truth="5", extra_info={"num_turns": 1}
    ) == pytest.approx(score(state, 0.4, 0.12))
    for broken in ['{"work": 0.4}', reply + " ok", '{"work": 1.4, "consumption": 0.1}']:
        assert compute_score("econ", broken, "5") == -1.0


def test_example_scores_played_episodes_and_overrides_a_years_final_score(tmp_path):
    function = load_reward_function(EXAMPLE, "compute_score")
    single = oracle_trajectories(tmp_path, "econ")
    assert [score_episode(function, t, None, {}).score for t in single] == [1.0, 1.0]
    year = oracle_trajectories(tmp_path, "econ_year")[0]
    assert score_episode(function, year, None, {}).score == pytest.approx(1.0)
    year.turns[4].reward = -1 / 12  # one month's reply broke the format
    assert score_episode(function, year, None, {}).score == -1.0


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "my_reward.py"
    path.write_text(body)
    return path


def test_a_file_that_cannot_be_imported_is_named(tmp_path):
    path = write(tmp_path, "import no_such_module_here\n")
    with pytest.raises(RewardFunctionError, match=rf"importing {path} failed: ModuleNotFound"):
        load_reward_function(path, "compute_score")
    with pytest.raises(RewardFunctionError, match="no such file"):
        load_reward_function(tmp_path / "absent.py", "compute_score")
    other = write(tmp_path, "def reward(**kw):\n    return 1.0\n")
    with pytest.raises(RewardFunctionError, match=r"has no function 'compute_score'.*reward"):
        load_reward_function(other, "compute_score")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("return None", "returned None"),
        ("return 'good'", "returned 'good'"),
        ("return float('nan')", "returned nan"),
        ("return {'score': float('inf')}", "returned inf"),
        ("return {'acc': 1.0}", "returned a dict without 'score'"),
        ("raise KeyError('goal')", "raised KeyError: 'goal'"),
    ],
)
def test_a_function_that_raises_or_returns_a_non_number_is_named(tmp_path, body, message):
    path = write(tmp_path, f"def compute_score(data_source, solution_str, ground_truth, "
                           f"extra_info=None):\n    {body}\n")  # fmt: skip
    function = load_reward_function(path, "compute_score")
    trajectory = Trajectory("e", "econ", 7, "g", 0, 0, "m")
    with pytest.raises(RewardFunctionError, match="reward function") as stopped:
        score_episode(function, trajectory, None, {})
    assert f"compute_score in {path}" in str(stopped.value)
    assert message in str(stopped.value)
