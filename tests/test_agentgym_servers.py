"""The client against fakes of AgentGym's servers: each documented server defect worked around."""

from __future__ import annotations

import asyncio

import pytest

from agentgym_fakes import (
    SQL_TASKS,
    alfworld_player,
    fake_agentgym_alfworld,
    fake_agentgym_sciworld,
    fake_agentgym_sqlgym,
    fake_agentgym_webshop,
    sqlgym_player,
    webshop_player,
)
from agenttrain.envs import get_spec
from agenttrain.serving.client import EnvServerPool, RemoteEnvironment
from support import serve_in_thread


async def play(env: RemoteEnvironment, task_id: int, player, max_turns: int = 10) -> float:
    """One episode as the rollout engine plays it: the spec's conversation start, the first
    observation, then the player's replies read by the spec's action rule."""
    spec = env.spec
    messages = [m.to_dict() for m in spec.conversation_start]
    first = await env.reset(task_id)
    messages.append({"role": "user", "content": first.text})
    reward = 0.0
    try:
        for _ in range(max_turns):
            reply = player(messages)
            messages.append({"role": "assistant", "content": reply})
            result = await env.step(spec.parse_action(reply))
            messages.append({"role": "user", "content": result.observation})
            reward = result.reward
            if result.done:
                break
    finally:
        await env.close()
    return reward


@pytest.mark.parametrize(
    ("kind", "fake", "task_id", "player"),
    [
        ("webshop", fake_agentgym_webshop, 5238, webshop_player),
        ("sqlgym", fake_agentgym_sqlgym, 10874, sqlgym_player),
        ("alfworld", fake_agentgym_alfworld, 2420, alfworld_player),
    ],
)
async def test_a_server_without_close_gets_its_sessions_reset_not_leaked(
    kind, fake, task_id, player
):
    app = fake()
    with serve_in_thread(app) as url:
        async with EnvServerPool(kind, url) as pool:
            rewards = [await play(pool.environment(), task_id, player) for _ in range(5)]
            assert pool.live_sessions[url] == 0
    assert rewards == [1.0] * 5
    paths = [path for path, _ in app.state.received]
    assert paths.count("/create") == 1 and paths.count("/reset") == 5
    assert "/close" not in paths  # AgentGym's server would answer 404


async def test_sqlgym_never_runs_two_episodes_on_one_of_its_8_slots():
    app = fake_agentgym_sqlgym()
    tasks = [*SQL_TASKS] * 6  # 18 episodes at once, over 8 slots
    with serve_in_thread(app) as url:
        async with EnvServerPool("sqlgym", url) as pool:
            rewards = await asyncio.gather(
                *(play(pool.environment(), task_id, sqlgym_player) for task_id in tasks)
            )
    assert rewards == [1.0] * len(tasks)  # each step ran its own episode's question
    assert len(app.state.ids) == 8
    assert [path for path, _ in app.state.received].count("/create") == 8


async def test_webshop_ids_handed_out_twice_are_never_shared_by_two_episodes():
    app = fake_agentgym_webshop(capacity=3)  # AgentGym's 8,000, made small
    tasks = [5238, 912, 6, 5238, 912]
    with serve_in_thread(app) as url:
        async with EnvServerPool("webshop", url) as pool:
            rewards = await asyncio.gather(
                *(play(pool.environment(), task_id, webshop_player) for task_id in tasks)
            )
    assert rewards == [1.0] * len(tasks)
    assert len(app.state.ids) == 3


async def test_alfworld_gets_one_request_at_a_time_from_the_client():
    assert get_spec("alfworld").protocol.max_requests_in_flight == 1
    app = fake_agentgym_alfworld()
    with serve_in_thread(app) as url:
        async with EnvServerPool("alfworld", url) as pool:
            rewards = await asyncio.gather(
                *(play(pool.environment(), task_id, alfworld_player) for task_id in (2420, 2421, 0))
            )
    assert rewards == [1.0] * 3
    assert app.state.most_waiting == 1  # never a queue in the server, where timeouts run


async def test_a_close_is_sent_once_even_when_it_times_out():
    """AgentGym's SciWorld answers a second /close with HTTP 500: a close is never replayed."""
    app = fake_agentgym_sciworld(first_close_s=1.0)
    with serve_in_thread(app) as url:
        async with EnvServerPool("sciworld", url, timeout_s=0.3, retries=3) as pool:
            env = pool.environment()
            await env.reset(0)
            await env.close()  # times out; logged, not raised
    assert [path for path, _ in app.state.received].count("/close") == 1


async def test_a_session_whose_request_failed_in_transit_is_not_reused():
    app = fake_agentgym_webshop()
    with serve_in_thread(app) as url:
        async with EnvServerPool("webshop", url, timeout_s=0.3, retries=0) as pool:
            env = pool.environment()
            await env.reset(5238)
            app.state.step_delay_s = 1.0
            with pytest.raises(Exception, match="did not answer"):
                await env.step("search[tea]")
            await env.close()
            app.state.step_delay_s = 0.0
            assert await play(pool.environment(), 912, webshop_player) == 1.0
    assert [path for path, _ in app.state.received].count("/create") == 2
