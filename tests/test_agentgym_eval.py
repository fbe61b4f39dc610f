"""`agenttrain eval --server URL` plays an episode end to end against a fake of each AgentGym
server, the model an OpenAI-compatible endpoint that replies like an expert."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from agentgym_fakes import (
    alfworld_player,
    fake_agentgym_alfworld,
    fake_agentgym_searchqa,
    fake_agentgym_sqlgym,
    fake_agentgym_webshop,
    scripted_chat_endpoint,
    searchqa_player,
    sqlgym_player,
    webshop_player,
)
from agenttrain.cli import app
from agenttrain.envs import get_spec
from support import serve_in_thread

runner = CliRunner()


def agentgym_test_split(env: str) -> str:
    """The split of AgentGym's own test ids (named apart where the env also runs in-process)."""
    return "agentgym_test" if "agentgym_test" in get_spec(env).splits() else "test"


@pytest.mark.parametrize(
    ("env", "fake", "player", "turns"),
    [
        ("webshop", fake_agentgym_webshop, webshop_player, 4),
        ("sqlgym", fake_agentgym_sqlgym, sqlgym_player, 1),
        ("alfworld", fake_agentgym_alfworld, alfworld_player, 4),
        ("searchqa", fake_agentgym_searchqa, searchqa_player, 2),
    ],
)
def test_eval_plays_agentgym_servers_end_to_end(tmp_path, env, fake, player, turns):
    split = agentgym_test_split(env)
    task_ids = get_spec(env).split(split)[:2]
    server = fake(task_ids)  # the fake's tasks under the ids the run asks for
    with serve_in_thread(server) as url, serve_in_thread(scripted_chat_endpoint(player)) as chat:
        result = runner.invoke(
            app,
            [
                "eval",
                "--env",
                env,
                "--server",
                url,
                "--model",
                "openai:expert",
                "--openai-base-url",
                f"{chat}/v1",
                "--split",
                split,
                "--tasks",
                "0-1",
                "--out",
                str(tmp_path),
            ],
            env={"COLUMNS": "200"},
        )
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "summary.json").read_text())["openai:expert"]
    assert summary["episodes"] == 2 and summary["env_errors"] == 0
    assert summary["success_rate"] == 1.0
    episodes = [
        json.loads(line)
        for line in (tmp_path / "openai-expert" / "episodes.jsonl").read_text().splitlines()
    ]
    assert sorted(e["task_id"] for e in episodes) == sorted(task_ids)
    assert all(e["num_turns"] == turns and e["reward"] == 1.0 for e in episodes)
    assert [path for path, _ in server.state.received].count("/create") <= 2
