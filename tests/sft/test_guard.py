"""The test-split guard: demonstrations and SFT data may never contain held-out tasks."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from agenttrain.cli import app
from agenttrain.envs import get_spec
from agenttrain.sft.data import read_conversations
from agenttrain.sft.guard import HeldOutGuard, HeldOutLeak

runner = CliRunner()


def test_demos_refuse_the_test_split_and_test_tasks(tmp_path):
    out = tmp_path / "demos.jsonl"
    result = runner.invoke(
        app, ["demos", "--split", "test", "--out", str(out)], env={"COLUMNS": "300"}
    )
    assert result.exit_code == 2
    assert "may not use the test split" in result.output
    first_test_id = get_spec("textcraft").split("test")[0]  # reachable through split=all
    result = runner.invoke(
        app,
        ["demos", "--split", "all", "--tasks", str(first_test_id), "--out", str(out)],
        env={"COLUMNS": "300"},
    )
    assert result.exit_code == 2 and "test tasks" in result.output
    assert not out.exists()


def test_sft_data_naming_a_test_task_is_refused(tmp_path, demos_file):
    record = json.loads(demos_file.read_text().splitlines()[0])
    record["task_id"] = get_spec("textcraft").split("test")[0]
    path = tmp_path / "leak.jsonl"
    path.write_text(json.dumps(record) + "\n")
    (conversation,) = read_conversations(path)
    with pytest.raises(HeldOutLeak, match=r"leak.jsonl:1: textcraft task \d+ is in the test"):
        HeldOutGuard("textcraft").check(conversation)


def test_a_test_goal_is_recognised_without_a_task_id(tmp_path):
    """AgentTraj data carries no usable task id: the first observation gives the goal away."""
    import asyncio

    from agenttrain.envs import make_env

    test_task = get_spec("textcraft").split("test")[3]

    async def first_observation() -> str:
        env = make_env("textcraft")
        text = (await env.reset(test_task)).text
        await env.close()
        return text

    observation = asyncio.run(first_observation())
    goal_line = next(line for line in observation.splitlines() if line.startswith("Goal:"))
    # the same goal with a different command list (as AgentGym's own data has) still leaks
    rewritten = "Crafting commands:\ncraft 1 thing using 1 stuff\n\n" + goal_line
    path = tmp_path / "agenttraj.jsonl"
    path.write_text(
        json.dumps(
            {
                "item_id": "textcraft_0",
                "conversations": [
                    {"from": "human", "value": "Instructions."},
                    {"from": "gpt", "loss": False, "value": "OK."},
                    {"from": "human", "value": rewritten},
                    {"from": "gpt", "value": "Thought: go.\nAction: inventory"},
                ],
            }
        )
        + "\n"
    )
    guard = HeldOutGuard("textcraft")
    (conversation,) = read_conversations(path)
    with pytest.raises(HeldOutLeak, match="shows a textcraft test task's first observation"):
        guard.check(conversation)


def test_a_test_goal_is_recognised_behind_an_untrained_first_action(tmp_path):
    """A recovery demonstration leaves its refused first action out of the loss: the first
    trained turn answers the refusal, not the first observation. Until 2026-12-05 the guard
    read only the message before the first trained turn, so such a conversation of a test
    goal passed."""
    test_task = get_spec("textcraft").split("test")[3]
    goal_line = next(
        line for line in _first_observation(test_task).splitlines() if line.startswith("Goal:")
    )
    conversation = [
        {"from": "human", "value": "Instructions."},
        {"from": "gpt", "loss": False, "value": "OK."},
        {
            "from": "human",
            "value": "Crafting commands:\ncraft 1 thing using 1 stuff\n\n" + goal_line,
        },
        {"from": "gpt", "loss": False, "value": "Thought: get it.\nAction: get 1 thing"},
        {"from": "human", "value": "Could not find thing"},
        {"from": "gpt", "value": "Thought: craft it.\nAction: inventory"},
    ]
    path = tmp_path / "agenttraj.jsonl"
    path.write_text(json.dumps({"item_id": "textcraft_0", "conversations": conversation}) + "\n")
    (read,) = read_conversations(path)
    with pytest.raises(HeldOutLeak, match="shows a textcraft test task's first observation"):
        HeldOutGuard("textcraft").check(read)


def _first_observation(task_id: int) -> str:
    import asyncio

    from agenttrain.envs import make_env

    async def reset() -> str:
        env = make_env("textcraft")
        text = (await env.reset(task_id)).text
        await env.close()
        return text

    return asyncio.run(reset())


def test_training_demonstrations_pass_the_guard(demos_file):
    guard = HeldOutGuard("textcraft")
    for conversation in read_conversations(demos_file):
        guard.check(conversation)  # no exception


def test_sft_refuses_leaked_data_before_training(tmp_path, demos_file, tiny_model_dir):
    record = json.loads(demos_file.read_text().splitlines()[0])
    record["task_id"] = get_spec("textcraft").split("test")[1]
    path = tmp_path / "leak.jsonl"
    path.write_text(demos_file.read_text() + json.dumps(record) + "\n")
    result = runner.invoke(
        app,
        [
            "sft",
            "configs/textcraft_sft.yaml",
            f"data.train=[{path}]",
            f"model.path={tiny_model_dir}",
            f"run.out_dir={tmp_path / 'run'}",
        ],
        env={"COLUMNS": "300"},
    )
    assert result.exit_code == 2
    assert "training data may not contain held-out tasks" in " ".join(result.output.split())
    assert not (tmp_path / "run" / "checkpoints").exists()
