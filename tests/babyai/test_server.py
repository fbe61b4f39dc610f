"""BabyAI through our server: AgentGym's BabyAI wire format (reference §1.2), many sessions at
once, and the oracle solving test tasks in-process and over HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import requests

from agenttrain.envs import get_spec, make_env
from agenttrain.envs.babyai.oracle import follow
from agenttrain.serving.client import EnvServerPool
from agenttrain.serving.launch import start_server
from support import health

SAMPLED_TEST_TASKS = (0, 4, 16, 29, 30, 32, 35, 72, 75)
"""Every test category; 32 and 72 start exactly like other tasks (the oracle tells them
apart by what follows)."""
MAX_TURNS = 20
"""AgentGym's turn limit for BabyAI."""


@pytest.fixture(scope="module")
def babyai_url() -> Iterator[str]:
    server = start_server("babyai")
    yield server.url
    server.stop()


def post(url: str, route: str, body: dict | None = None):
    response = requests.post(f"{url}/{route}", json=body, timeout=30)
    assert response.status_code == 200
    return response.json()


def test_routes_and_fields_are_agentgyms(babyai_url):
    assert requests.get(babyai_url, timeout=5).json() == "This is environment BabyAI."
    created = requests.post(f"{babyai_url}/create", timeout=5).json()  # no body, as AgentGym's
    assert list(created) == ["id"]
    session = created["id"]
    reset = post(babyai_url, "reset", {"id": session, "data_idx": 0})
    assert set(reset) == {"observation", "reward", "score", "deleted", "done"}
    assert [reset[k] for k in ("reward", "score", "deleted", "done")] == [0, 0, False, False]
    assert reset["observation"].startswith("Your goal: go to the red ball\n")
    step = post(babyai_url, "step", {"id": session, "action": "turn left"})
    assert set(step) == {"observation", "reward", "score", "done"}
    observed = requests.get(f"{babyai_url}/observation", params={"id": session}, timeout=5)
    assert observed.json() == {**step, "deleted": False}
    assert post(babyai_url, "close", {"id": session}) is True
    assert post(babyai_url, "close", {"id": session}) is False


def test_errors_are_agentgyms_texts(babyai_url):
    session = post(babyai_url, "create")["id"]
    post(babyai_url, "reset", {"id": session, "data_idx": 0})
    won = post(babyai_url, "step", {"id": session, "action": "go to red ball 1"})
    assert won["done"] and won["score"] == won["reward"] > 0.1
    after = post(babyai_url, "step", {"id": session, "action": "turn left"})
    assert after == {"error": f"The task with environment {session} has finished."}
    unknown = post(babyai_url, "step", {"id": 10**6, "action": "turn left"})
    assert unknown == {"error": f"The id {10**6} is not valid."}
    again = post(babyai_url, "reset", {"id": session, "data_idx": 0})  # reset reopens it
    assert not again["done"]
    post(babyai_url, "close", {"id": session})


def test_an_invalid_action_answers_its_text_and_the_action_list(babyai_url):
    session = post(babyai_url, "create")["id"]
    reset = post(babyai_url, "reset", {"id": session, "data_idx": 0})
    step = post(babyai_url, "step", {"id": session, "action": "fly away"})
    listed = reset["observation"].rsplit("\n", 1)[1]
    assert step["observation"] == (
        f"The action is not recognized. Please check valid actions.\n{listed}"
    )
    assert (step["reward"], step["score"], step["done"]) == (0, 0, False)
    post(babyai_url, "close", {"id": session})


async def play_oracle(env, task_id: int) -> tuple[float, bool, int]:
    observations = [(await env.reset(task_id)).text]
    for turn in range(1, MAX_TURNS + 1):
        result = await env.step(follow(observations).action)
        if result.done:
            return result.reward, True, turn
        observations.append(result.observation)
    return 0.0, False, MAX_TURNS


async def test_oracle_solves_sampled_test_tasks_in_process():
    assert set(SAMPLED_TEST_TASKS) <= set(get_spec("babyai").split("test"))
    for task_id in SAMPLED_TEST_TASKS:
        reward, done, _ = await play_oracle(make_env("babyai"), task_id)
        assert done and reward >= get_spec("babyai").success_reward, task_id


async def test_oracle_solves_test_tasks_over_http_in_parallel_sessions(babyai_url):
    baseline = health(babyai_url)["sessions"]
    async with EnvServerPool("babyai", babyai_url) as pool:

        async def solve(task_id: int) -> tuple[float, bool, int]:
            async with pool.environment() as env:
                return await play_oracle(env, task_id)

        # All sessions step interleaved; each must see exactly its own episode.
        remote = await asyncio.gather(*(solve(t) for t in SAMPLED_TEST_TASKS))
    local = [await play_oracle(make_env("babyai"), t) for t in SAMPLED_TEST_TASKS]
    assert remote == local
    assert all(done for _, done, _ in remote)
    assert health(babyai_url)["sessions"] == baseline
