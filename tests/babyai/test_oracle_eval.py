"""`agenttrain eval --env babyai --model oracle`: the oracle as the CLI plays it."""

from __future__ import annotations

import json
import time

import pytest
from typer.testing import CliRunner

from agenttrain.cli import app
from agenttrain.envs import get_spec
from agenttrain.envs.babyai.game import BabyAIGame
from agenttrain.envs.babyai.levels import task


@pytest.mark.slow  # over 9 s on 2 cores: the full suite only
def test_the_oracle_solves_a_test_task_that_starts_like_another(tmp_path):
    look_alike, played = 125, 163  # same first observation; 125's moves do not solve 163
    assert BabyAIGame(task(look_alike)).first_observation() == (
        BabyAIGame(task(played)).first_observation()
    )
    position = get_spec("babyai").split("test").index(played)
    args = ["--env", "babyai", "--model", "oracle", "--split", "test", "--tasks", str(position)]
    result = CliRunner().invoke(app, ["eval", *args, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    episode = json.loads((tmp_path / "oracle" / "episodes.jsonl").read_text())
    assert episode["task_id"] == played and episode["success"]


@pytest.mark.slow  # over 9 s on 2 cores: the full suite only
def test_agentgym_exact_babyai_is_served_from_the_cli_and_one_failed_episode_is_recorded(
    tmp_path,
):
    """`serve babyai --env-kwarg agentgym_compat=true` keeps AgentGym's defect on test task 29
    (the episode goes on after a success); the oracle, whose game ended, raises there. That
    episode is recorded as an agent error and the evaluation of tasks 0-19 goes on (issue 24).
    """
    from agenttrain.serving.launch import start_server

    server = start_server("babyai", extra_args=["--env-kwarg", "agentgym_compat=true"])
    try:
        args = ["--env", "babyai", "--server", server.url, "--model", "oracle"]
        args += ["--split", "test", "--tasks", "0-19", "--out", str(tmp_path)]
        result = CliRunner().invoke(app, ["eval", *args], env={"COLUMNS": "200"})
    finally:
        server.stop()
    assert result.exit_code == 0, result.output
    lines = (tmp_path / "oracle" / "episodes.jsonl").read_text().splitlines()
    episodes = [json.loads(line) for line in lines if line]
    assert len(episodes) == 20
    failed = [e for e in episodes if e["finish_reason"] == "agent_error"]
    assert [e["task_id"] for e in failed] == [29]
    assert "the episode has ended" in failed[0]["error"]
    summary = json.loads((tmp_path / "oracle" / "summary.json").read_text())
    assert summary["agent_errors"] == 1 and summary["scored_episodes"] == 19
    report = (tmp_path / "report.md").read_text()
    assert "task 29 sample 0: agent_error" in report


def test_an_option_the_environment_does_not_take_is_refused_by_serve():
    result = CliRunner().invoke(
        app, ["serve", "babyai", "--env-kwarg", "agentgym=true"], env={"COLUMNS": "200"}
    )
    output = " ".join(result.output.split())  # the console wraps at its own width
    assert result.exit_code == 2
    assert "takes no option agentgym" in output
    assert "agentgym_compat (default False)" in output


@pytest.mark.slow  # over 9 s on 2 cores: the full suite only
def test_demos_end_in_bounded_time_and_report_a_solver_past_its_budget(tmp_path):
    """minigrid's bot never finishes planning train task 188 (position 102): the oracle's
    budget turns it into a recorded failure that `demos` reports (issue 24)."""
    position = get_spec("babyai").split("train").index(188)
    out = tmp_path / "demos.jsonl"
    args = ["--env", "babyai", "--split", "train", "--tasks", str(position), "--out", str(out)]
    started = time.perf_counter()
    result = CliRunner().invoke(app, ["demos", *args])
    assert time.perf_counter() - started < 120
    output = " ".join(result.output.split())
    assert result.exit_code == 1  # nothing to keep
    assert "not kept: 1 agent_error (task 188: BudgetExceeded: the BabyAI oracle ran past" in output
    assert out.read_text() == ""
