"""SciWorld: AgentGym's games and wire format through our server, rewards, the gold-path
oracle, and its worker processes (sessions across workers, a SIGKILLed worker)."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
import requests

from agenttrain.envs import get_spec, make_env
from agenttrain.envs.sciworld.games import game, games, splits
from agenttrain.envs.sciworld.jvm import find_java
from agenttrain.envs.sciworld.oracle import identify, plan
from agenttrain.serving.server import create_app
from support import serve_in_thread

needs_java = pytest.mark.skipif(
    find_java() is None, reason="no Java runtime here (apt-get install default-jre-headless)"
)


def test_games_follow_agentgyms_order_and_id_ranges():
    assert len(games()) == 4639
    firsts = {g.task.task_id: g.data_idx for g in reversed(games())}
    assert firsts == {
        "1-1": 0, "1-2": 30, "1-3": 60, "1-4": 90, "2-1": 120, "2-2": 660, "2-3": 1096,
        "3-1": 1396, "3-2": 1416, "3-3": 1436, "3-4": 2336, "4-1": 2936, "4-2": 3236,
        "4-3": 3536, "4-4": 3836, "6-1": 4136, "6-2": 4168, "6-3": 4204, "7-1": 4240,
        "7-2": 4365, "7-3": 4490, "8-1": 4615, "8-2": 4629,
    }  # fmt: skip
    assert (game(4638).task.name, game(4638).variation) == ("identify-life-stages-2", 9)


def test_splits_never_share_a_variation_and_test_has_agentgyms_mix():
    split = splits()
    assert not set(split["train"]) & set(split["test"])
    assert not set(split["val"]) & (set(split["train"]) | set(split["test"]))
    assert all(game(i).split == "test" for i in split["test"])
    mix: dict[str, int] = {}
    for i in split["test"]:
        mix[game(i).task.category] = mix.get(game(i).task.category, 0) + 1
    assert mix == {"Measure": 53, "Test-Cond": 83, "Find": 44, "Chem-Mix": 5, "Lifespan": 15}
    assert get_spec("sciworld").split("test") == split["test"]


@pytest.fixture(scope="module")
def server():
    app = create_app("sciworld", workers=2)
    with serve_in_thread(app) as url:
        yield url, app


def post(url: str, route: str, **body: object) -> object:
    return requests.post(f"{url}{route}", json=body or None, timeout=60).json()


@needs_java
def test_wire_format_is_agentgyms(server):
    url, _ = server
    assert requests.get(url, timeout=5).json() == "This is environment ScienceWorld."
    created = post(url, "/create")
    assert list(created) == ["id"]
    sid = created["id"]
    reset = post(url, "/reset", id=sid, data_idx=3836)
    assert list(reset) == [
        "task_name", "var_num", "task_description", "observation", "reward", "score",
        "deleted", "done",
    ]  # fmt: skip
    assert (reset["task_name"], reset["var_num"], reset["score"]) == ("find-animal", 0, 0)
    assert reset["task_description"].startswith("Your task is to find a(n) animal.")
    assert reset["observation"].startswith("This room is called the hallway.")
    hint = requests.get(f"{url}/action_hint", params={"id": sid}, timeout=30).json()
    assert "look around" in hint["possible_actions"] and "air" in hint["possible_objects"]
    invalid = post(url, "/step", id=sid, action="fly to the moon")
    assert invalid == {
        "observation": "No known action matches that input.",
        "reward": 0,
        "score": 0,
        "done": False,
    }
    failed = post(url, "/step", id=sid, action="focus on air")  # the wrong thing: failure
    assert (failed["reward"], failed["score"], failed["done"]) == (-100, -100, True)
    finished = {"error": f"The task with environment {sid} has finished."}
    assert post(url, "/step", id=sid, action="look around") == finished
    assert requests.get(f"{url}/goals", params={"id": sid}, timeout=30).json() == finished
    assert post(url, "/close", id=sid) is True
    assert post(url, "/step", id=sid, action="look around") == {
        "error": f"The task with environment {sid} has been deleted."
    }
    assert post(url, "/step", id=10**6, action="look") == {"error": "The id 1000000 is not valid."}


@needs_java
@pytest.mark.slow  # over 9 s on 2 cores: the full suite only
def test_gold_episodes_reach_score_100_with_rewards_that_are_score_deltas(server):
    url, _ = server
    for data_idx in (528, 2242, 3791, 4197):  # test games of four categories
        sid = post(url, "/create")["id"]
        reset = post(url, "/reset", id=sid, data_idx=data_idx)
        first = f"{reset['task_description']}\n{reset['observation']}"
        assert identify(first).data_idx == data_idx
        assert reset["reward"] == reset["score"]  # the first "look around" may already score
        score, answer = reset["score"], {}
        for step in plan(first):
            answer = post(url, "/step", id=sid, action=step.action)
            assert answer["reward"] == answer["score"] - score
            score = answer["score"]
            if answer["done"]:
                break
        assert (answer["score"], answer["done"]) == (100, True), data_idx
        post(url, "/close", id=sid)


@needs_java
def test_sessions_on_different_workers_play_independently(server):
    url, app = server

    def play(data_idx: int) -> list[str]:
        sid = post(url, "/create")["id"]
        seen = [post(url, "/reset", id=sid, data_idx=data_idx)["task_name"]]
        for action in ("look around", "open door to kitchen", "go to kitchen", "inventory"):
            seen.append(post(url, "/step", id=sid, action=action)["observation"])
        post(url, "/close", id=sid)
        # Room descriptions list objects in an order that depends on the JVM's history.
        return seen[:1] + seen[2:]

    async def together() -> list[list[str]]:
        return await asyncio.gather(*(asyncio.to_thread(play, i) for i in (0, 2936, 0, 2936)))

    results = asyncio.run(together())
    assert results[0] == results[2] and results[1] == results[3] and results[0] != results[1]
    assert app.state.pool.stats()["workers_started"] >= 2


@needs_java
def test_a_sigkilled_worker_fails_its_session_only_and_the_server_keeps_serving(server):
    url, app = server
    pool = app.state.pool
    first, second = post(url, "/create")["id"], post(url, "/create")["id"]
    post(url, "/reset", id=first, data_idx=0)
    post(url, "/reset", id=second, data_idx=30)
    store = app.state.store
    victim = store.get(first).env.worker_pid
    assert victim != store.get(second).env.worker_pid
    os.kill(victim, signal.SIGKILL)
    lost = post(url, "/step", id=first, action="look around")
    assert lost["error"].startswith("WorkerCrashed: the SciWorld worker process")
    assert "killed by SIGKILL" in lost["error"]
    assert post(url, "/step", id=second, action="look around")["done"] is False
    third = post(url, "/create")["id"]
    assert post(url, "/reset", id=third, data_idx=60)["task_name"] == "freeze"
    assert requests.get(f"{url}/health", timeout=5).json()["pool"]["workers_crashed"] >= 1
    assert victim not in pool.stats()["worker_pids"]
    for sid in (first, second, third):
        post(url, "/close", id=sid)


@needs_java
async def test_in_process_runs_use_the_worker_pool_with_the_agents_first_observation():
    env = make_env("sciworld")
    try:
        first = await env.reset(120)
        assert env.worker_pid != os.getpid()
        assert first.text == f"{first.info['task_description']}\n{first.info['observation']}"
        assert identify(first.text).data_idx == 120
        assert first.info["category"] == "Measure"
    finally:
        await env.close()
