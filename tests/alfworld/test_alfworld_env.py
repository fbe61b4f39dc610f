"""ALFWorld in-process over a stand-in `alfworld` (the real one needs a data download):
AgentGym's observations, reward and wire format, worker processes, and what a user without
the package or the data is told (reference: agentgym.md section 1.4)."""

from __future__ import annotations

import asyncio
import os

import pytest
import requests
from fake_alfworld_game import COMMANDS, SOLUTION

from agenttrain.envs import EnvError, NotInProcess, make_env
from agenttrain.envs.alfworld import AlfWorldEnv, ALFWorldUnavailable, register_alfworld
from agenttrain.envs.alfworld import requirements as alfworld_requirements
from agenttrain.envs.registry import registration
from agenttrain.envs.workers import WorkerPool
from agenttrain.serving.launch import start_server

FIRST = (  # AgentGym drops the banner paragraph and joins the rest with single newlines
    "You are in the middle of a room. Looking quickly around you, you see a countertop 1 "
    "and a coffeemachine 1.\nYour task is to: put a mug in coffeemachine."
)
TEST_GAME_TYPE = (
    "pick_cool_then_place_in_recep-Mug-None-CoffeeMachine-23/trial_T20190908_143209_571893"
)


async def play(env, task_id: int, actions: list[str]) -> list:
    results = [await env.reset(task_id)]
    for action in actions:
        results.append(await env.step(action))
    await env.close()
    return results


def test_an_episode_reads_as_agentgyms_client_sees_it(fake_alfworld):
    first, *steps = asyncio.run(
        play(AlfWorldEnv(), 2420, ["go to countertop 1", "jump", *SOLUTION[1:]])
    )
    assert first.text == f"{FIRST}\nAVAILABLE ACTIONS: {','.join(COMMANDS)}"
    assert first.info["observation"] == FIRST  # the banner paragraph dropped
    assert first.info["task_type"] == TEST_GAME_TYPE
    arrived, invalid, took, arrived_again, won = steps
    assert arrived.observation == "On the countertop 1, you see a mug 1."  # "You arrive at loc 3. "
    assert (invalid.observation, invalid.reward, invalid.done) == ("Nothing happened.", 0.0, False)
    assert took.observation == "You pick up the mug 1 from the countertop 1."
    assert arrived_again.info["available_actions"] == COMMANDS
    assert (won.reward, won.done) == (1.0, True)


def test_registered_in_worker_processes_and_served_in_agentgyms_format(fake_alfworld):
    entry = registration("alfworld")
    assert entry.in_process and entry.process_workers > 0
    pool = WorkerPool("alfworld", 1)
    try:
        env = pool.environment()
        results = asyncio.run(play(env, 0, SOLUTION))
        assert results[0].text.startswith(FIRST) and results[-1].reward == 1.0
        assert pool.stats()["workers_started"] == 1
        assert pool.stats()["worker_pids"][0] != os.getpid()
    finally:
        pool.shutdown()
    server = start_server("alfworld")
    try:
        created = requests.post(f"{server.url}/create", timeout=10).json()
        body = {"id": created["id"], "game": 2420, "world_type": "Text"}
        reset = requests.post(f"{server.url}/reset", json=body, timeout=30).json()
        assert reset == {
            "id": created["id"],
            "observation": FIRST,
            "available_actions": COMMANDS,
            "task_type": TEST_GAME_TYPE,
        }
        for action in SOLUTION:
            body = {"id": created["id"], "action": action}
            step = requests.post(f"{server.url}/step", json=body, timeout=30).json()
        assert list(step) == ["observation", "reward", "available_actions", "done"]
        assert (step["reward"], step["done"]) == (1, True)
        again = requests.post(f"{server.url}/step", json=body, timeout=30).json()
        assert again == {"error": f"The task with environment {created['id']} has finished."}
    finally:
        server.stop()


def test_a_game_missing_from_the_data_folder_is_named(fake_alfworld):
    env = AlfWorldEnv()
    with pytest.raises(EnvError, match=r"ALFWorld game 5 is not in .*game.tw-pddl does not exist"):
        env.reset_sync(5)


@pytest.mark.parametrize(
    ("installed", "data", "named"),
    [
        (
            False,
            None,
            ["the `alfworld` package (pip install alfworld", "$ALFWORLD_DATA is not set"],
        ),
        (True, None, ["$ALFWORLD_DATA is not set (export ALFWORLD_DATA=", "alfworld-download"]),
        (True, "empty", ["json_2.1.1 does not exist (run alfworld-download)"]),
    ],
)
def test_without_package_or_data_every_refusal_names_what_is_missing(
    tmp_path, monkeypatch, installed, data, named
):
    monkeypatch.setattr(alfworld_requirements, "package_installed", lambda: installed)
    if data is None:
        monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    else:
        monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))
    try:
        entry = register_alfworld(replace_existing=True)
        assert not entry.in_process
        with pytest.raises(ALFWorldUnavailable) as direct:
            AlfWorldEnv()
        with pytest.raises(NotInProcess) as via_registry:
            make_env("alfworld")
        for refusal in (str(direct.value), str(via_registry.value), entry.spec.requirements):
            assert all(piece in refusal for piece in named), refusal
            assert "AgentGym's ALFWorld server" in refusal
        assert "--server" in str(direct.value) and "--server" in str(via_registry.value)
    finally:
        monkeypatch.undo()
        register_alfworld(replace_existing=True)
