"""Few-shot retrieval: a pool of good train decisions, nearest by state, never val/test."""

from __future__ import annotations

import asyncio
import json

import pytest
from typer.testing import CliRunner

from agenttrain.agent.fewshot import (
    Example,
    FewshotSplitError,
    Retriever,
    build_pool,
    format_examples,
    read_pool,
    state_features,
    write_pool,
)
from agenttrain.cli import app
from agenttrain.envs import make_env

runner = CliRunner()


def oracle_episodes(tmp_path, split: str, tasks: str) -> object:
    out = tmp_path / f"eval-{split}"
    result = runner.invoke(
        app,
        ["eval", "--env", "econ", "--split", split, "--tasks", tasks, "--model", "oracle",
         "--format", "raw", "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return out / "oracle" / "episodes.jsonl"


def episode(task_id: int, reward: float, savings: float, env: str = "econ") -> dict:
    observation = f"State:\n- savings: {savings}\n- inflation (monthly): 0.50%\nDecide."
    action = json.dumps({"work": 0.5, "consumption": round(reward, 2)})
    return {
        "env": env,
        "task_id": task_id,
        "finish_reason": "done",
        "messages": [
            {"role": "user", "content": "instructions"},
            {"role": "assistant", "content": "OK."},
            {"role": "user", "content": observation},
            {"role": "assistant", "content": action},
        ],
        "turns": [{"reply": action, "action": action, "reward": reward}],
    }


def test_state_lines_are_read_as_numbers():
    text = "- savings: 120.50\n- inflation (monthly): -0.20%\n1. savings 3 -> {}"
    assert state_features(text) == {"savings": 120.5, "inflation (monthly)": -0.2}


def test_pool_keeps_decisions_at_or_above_the_quantile():
    episodes = [
        episode(task, reward, 100.0 * task) for task, reward in enumerate([0.1, 0.2, 0.9, 1.0])
    ]
    episodes.append(episode(9, -1.0, 5.0))  # format failures never enter
    pool = build_pool(episodes, ("econ",), range(1000), quantile=0.5)
    assert sorted(e.task_id for e in pool) == [2, 3]
    assert pool[0].state == {"savings": 200.0, "inflation (monthly)": 0.5}


def test_pool_refuses_episodes_of_val_or_test_tasks_naming_them():
    episodes = [episode(3, 0.9, 1.0), episode(1100, 0.9, 2.0), episode(1050, 0.5, 3.0)]
    with pytest.raises(
        FewshotSplitError, match=r"2 task\(s\) not in the train split \(1050, 1100\)"
    ):
        build_pool(episodes, ("econ",), range(1000))


def test_nearest_states_come_first_and_the_own_task_is_left_out():
    pool = [Example("econ", t, 0, {"savings": s, "rate": 1.0}, "{}", 1.0) for t, s in
            [(1, 100.0), (2, 5000.0), (3, 120.0), (4, 90.0)]]  # fmt: skip
    retriever = Retriever(pool, k=2)
    assert [e.task_id for e in retriever.nearest({"savings": 112.0, "rate": 1.0})] == [3, 1]
    nearest = retriever.nearest({"savings": 112.0, "rate": 1.0}, exclude_task=3)
    assert [e.task_id for e in nearest] == [1, 4]


def test_built_pool_is_shown_in_econ_prompts(tmp_path):
    episodes = oracle_episodes(tmp_path, "train", "0-11")
    pool_file = tmp_path / "pool.jsonl"
    result = runner.invoke(
        app, ["fewshot-pool", str(episodes), "--env", "econ", "--out", str(pool_file)]
    )
    assert result.exit_code == 0, result.output
    pool = read_pool(pool_file)
    assert pool and all(e.task_id in range(12) for e in pool)
    env = make_env("econ", fewshot_pool=str(pool_file), fewshot_k=2)
    first = asyncio.run(env.reset(pool[0].task_id))
    assert "Good decisions of households in similar situations" in first.text
    shown = first.text.split("similar situations", 1)[1]
    assert shown.count(" -> {") == 2
    own_line = format_examples([pool[0]]).splitlines()[1].removeprefix("1. ")
    assert own_line not in shown  # a task never sees its own decision


def test_cli_refuses_test_episodes_and_env_refuses_a_tampered_pool(tmp_path):
    test_episodes = oracle_episodes(tmp_path, "test", "0-1")
    result = runner.invoke(
        app, ["fewshot-pool", str(test_episodes), "--env", "econ", "--out", str(tmp_path / "p")]
    )
    assert result.exit_code == 2
    assert "not in the train split (1100, 1101)" in result.output
    tampered = tmp_path / "tampered.jsonl"
    write_pool(tampered, [Example("econ", 1150, 0, {"savings": 1.0}, "{}", 1.0)])
    with pytest.raises(FewshotSplitError, match=r"\(1150\)"):
        make_env("econ", fewshot_pool=str(tampered))
