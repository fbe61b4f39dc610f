"""`agenttrain serve sqlgym` speaks AgentGym's sqlgym dialect (§1.6), so AgentGym's
`SqlGymEnvClient` (requests: bare-int `/create`, `env_idx`, `item_id`, `[observation, null]`
resets, `state` in step answers) and our own client drive it."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import requests
from typer.testing import CliRunner

from agenttrain.cli import app
from agenttrain.envs.sqlgym.bundled import bundled_tasks
from agenttrain.serving.launch import start_server


@pytest.fixture(scope="module")
def sqlgym_url() -> Iterator[str]:
    server = start_server("sqlgym")
    yield server.url
    server.stop()


def post(url: str, route: str, body: dict | None = None):
    response = requests.post(f"{url}/{route}", json=body, timeout=30)
    assert response.status_code == 200
    return response.json()


def test_an_episode_in_agentgyms_dialect(sqlgym_url):
    task = bundled_tasks().task(3)
    assert requests.get(sqlgym_url, timeout=5).json() == "ok"
    env_idx = post(sqlgym_url, "create")  # no body; a bare int back
    assert isinstance(env_idx, int)
    assert post(sqlgym_url, "reset", {"env_idx": env_idx, "item_id": 3}) == [
        task.observation,
        None,
    ]
    observed = requests.get(f"{sqlgym_url}/observation", params={"env_idx": env_idx}, timeout=5)
    assert observed.json() == task.observation
    step = post(sqlgym_url, "step", {"env_idx": env_idx, "action": task.gold_sql})
    tasks = bundled_tasks()
    expected = str(tasks.connect(task).execute(task.gold_sql).fetchall())
    assert {k: step[k] for k in ("state", "reward", "done")} == {
        "state": expected[:100] + ("..." if len(expected) > 100 else ""),
        "reward": 1,
        "done": True,
    }
    assert step["info"] == {"ground_truth": task.gold_sql}  # as AgentGym's server answers


def test_a_bad_query_answers_sqlites_error_over_http(sqlgym_url):
    env_idx = post(sqlgym_url, "create")
    post(sqlgym_url, "reset", {"env_idx": env_idx, "item_id": 0})
    step = post(sqlgym_url, "step", {"env_idx": env_idx, "action": "SELECT FROM"})
    assert (step["state"], step["reward"], step["done"]) == (
        'near "FROM": syntax error',
        0,
        True,
    )
    assert step["info"] == {"ground_truth": bundled_tasks().task(0).gold_sql}


def test_eval_plays_the_oracle_through_the_server(sqlgym_url, tmp_path):
    args = ["eval", "--env", "sqlgym", "--model", "oracle", "--tasks", "0-5"]
    result = CliRunner().invoke(app, [*args, "--server", sqlgym_url, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "oracle" / "summary.json").read_text())
    assert (summary["episodes"], summary["success_rate"], summary["env_errors"]) == (6, 1.0, 0)
