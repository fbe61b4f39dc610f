"""The async client: identity checks, typed errors, retries, spreading, and no leaked sessions."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
import requests

from agentgym_fakes import (
    fake_agentgym_alfworld,
    fake_agentgym_sciworld,
    fake_agentgym_searchqa,
    fake_agentgym_webshop,
)
from agenttrain.envs import EnvironmentNotReset
from agenttrain.envs.registry import register
from agenttrain.serving.client import EnvServerPool
from agenttrain.serving.errors import (
    EnvRequestFailed,
    ServerBusy,
    ServerRefused,
    ServerTimeout,
    ServerUnreachable,
    SessionLost,
    WrongServer,
)
from agenttrain.serving.server import create_app
from support import CounterEnv, health, serve_in_thread


def free_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


async def test_a_server_of_another_environment_is_a_clear_error(textcraft_url):
    async with EnvServerPool("babyai", textcraft_url) as pool:
        with pytest.raises(WrongServer) as caught:
            await pool.environment().reset(0)
    message = str(caught.value)
    assert textcraft_url in message
    assert "'This is environment BabyAI.'" in message
    assert "'This is environment TextCraft.'" in message


async def test_a_missing_token_names_the_options_that_give_it(start_textcraft):
    """Issue 28: a 401 said 'bearer token' but not how a client sends one."""
    url = start_textcraft("--token", "s3cret").url
    async with EnvServerPool("textcraft", url) as pool:
        with pytest.raises(ServerRefused) as caught:
            await pool.environment().reset(0)
    assert caught.value.status == 401
    assert "--token, $AGENTTRAIN_SERVER_TOKEN or env.token" in str(caught.value)


async def test_an_unreachable_server_is_named_after_retries():
    url = free_port_url()
    started = time.monotonic()
    async with EnvServerPool("textcraft", url, retries=2, backoff_s=0.01) as pool:
        with pytest.raises(ServerUnreachable) as caught:
            await pool.environment().reset(0)
    assert url in str(caught.value)
    assert "ClientConnectorError" in str(caught.value)
    assert time.monotonic() - started < 5


async def test_step_before_reset_is_refused(textcraft_url):
    async with EnvServerPool("textcraft", textcraft_url) as pool:
        with pytest.raises(EnvironmentNotReset):
            await pool.environment().step("inventory")


async def test_a_closed_session_is_reported_as_lost(textcraft_url):
    async with EnvServerPool("textcraft", textcraft_url) as pool:
        env = pool.environment()
        await env.reset(12)
        requests.post(f"{textcraft_url}/close", json={"id": env.session_id}, timeout=5)
        with pytest.raises(SessionLost, match="has been deleted"):
            await env.step("inventory")


async def test_server_side_environment_errors_carry_the_server_message():
    register("counter-test", CounterEnv, replace=True)
    with serve_in_thread(create_app("counter-test")) as url:
        async with EnvServerPool("counter-test", url) as pool, pool.environment() as env:
            await env.reset(3)
            with pytest.raises(EnvRequestFailed) as caught:
                await env.step("crash")
            assert caught.value.server_message == "RuntimeError: boom"
            assert (await env.step("+1")).observation == "1"


async def test_sessions_spread_over_servers_and_all_close(start_textcraft):
    urls = [start_textcraft().url for _ in range(3)]
    async with EnvServerPool("textcraft", urls) as pool:
        envs = [pool.environment() for _ in range(30)]
        for env in envs:  # one at a time, so that "least loaded" is well defined
            await env.reset(12)
        assert sorted(pool.live_sessions.values()) == [10, 10, 10]
        assert [health(u)["sessions"] for u in urls] == [10, 10, 10]
        await asyncio.gather(*(env.close() for env in envs[:15]))
        assert sum(pool.live_sessions.values()) == 15
    assert [health(u)["sessions"] for u in urls] == [0, 0, 0]  # aclose closed the rest


async def test_a_dead_server_is_skipped(textcraft_url):
    dead = free_port_url()
    async with EnvServerPool("textcraft", [dead, textcraft_url], retries=0) as pool:
        envs = [pool.environment() for _ in range(4)]
        for env in envs:
            await env.reset(12)
        assert {env.url for env in envs} == {textcraft_url}


async def test_a_full_server_is_retried_then_reported(start_textcraft):
    url = start_textcraft("--max-sessions", "1").url
    async with EnvServerPool("textcraft", url, retries=2, backoff_s=0.01) as pool:
        holder = pool.environment()
        await holder.reset(12)
        with pytest.raises(ServerBusy, match="session cap reached"):
            await pool.environment().reset(12)

    async with EnvServerPool("textcraft", url, retries=8, backoff_s=0.02) as pool:
        holder = pool.environment()
        await holder.reset(12)

        async def release_soon() -> None:
            await asyncio.sleep(0.05)
            await holder.close()

        _, first = await asyncio.gather(release_soon(), pool.environment().reset(12))
        assert first.text.endswith("Goal: craft bread.")


async def test_a_lost_session_is_recreated_on_reset(start_textcraft):
    url = start_textcraft("--session-ttl", "1").url
    async with EnvServerPool("textcraft", url) as pool, pool.environment() as env:
        await env.reset(12)
        old = env.session_id
        deadline = time.monotonic() + 10
        while health(url)["sessions"] and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        first = await env.reset(0)
        assert env.session_id != old
        assert first.text.endswith("Goal: craft acacia planks.")


FAKES = {
    "webshop": fake_agentgym_webshop,
    "searchqa": fake_agentgym_searchqa,
    "alfworld": fake_agentgym_alfworld,
    "sciworld": fake_agentgym_sciworld,
}


@pytest.mark.parametrize(
    ("kind", "task_id", "first_text", "sent_reset", "closes"),
    [
        (
            "webshop",
            5238,
            "WebShop [SEP] Instruction: [SEP] i want organic green tea with 100 bags, and price "
            "lower than 20.00 dollars [SEP] Search",
            {"session_id": 5238},
            False,
        ),
        ("searchqa", 12545, "Question: What is the capital of Ostland?", {"id": 12545}, True),
        (
            "alfworld",
            2420,
            "Your task is to: put some mug on desk.\nAVAILABLE ACTIONS: go to countertop 1,"
            "go to desk 1,go to cabinet 1,inventory,look",
            {"game": 2420, "world_type": "Text"},
            False,
        ),
        (
            "sciworld",
            5238,
            "Your task is to boil water.\nThis room is called the kitchen.",
            {"data_idx": 5238},
            True,
        ),
    ],
)
async def test_the_client_speaks_each_agentgym_dialect(
    kind, task_id, first_text, sent_reset, closes
):
    app = FAKES[kind]()
    with serve_in_thread(app) as url:
        async with EnvServerPool(kind, url) as pool:
            env = pool.environment()
            first = await env.reset(task_id)
            result = await env.step("click[buy now]")
            session = env.session_id
            await env.close()
    assert first.text.endswith(first_text)
    assert isinstance(result.observation, str) and isinstance(result.reward, float)
    id_field = "env_idx" if kind in ("webshop", "searchqa") else "id"
    received = dict(app.state.received)
    assert received["/reset"] == {id_field: session, **sent_reset}
    assert received["/step"] == {id_field: session, "action": "click[buy now]"}
    if kind == "searchqa":
        assert received["/create"] == {"id": task_id}  # SearchQA preloads the item on create
    assert ("/close" in received) is closes


async def test_a_step_that_times_out_is_not_replayed():
    app = fake_agentgym_sciworld()
    with serve_in_thread(app) as url:
        async with EnvServerPool("sciworld", url, timeout_s=0.3, retries=3) as pool:
            env = pool.environment()
            await env.reset(0)
            with pytest.raises(ServerTimeout, match=r"did not answer within 0\.3 s"):
                await env.step("hang")
    steps = [body for path, body in app.state.received if path == "/step"]
    assert len(steps) == 1
