"""The process-isolated worker pool, on TextCraft (no Java needed): pinning, the size bound,
a SIGKILLed worker failing only its own sessions, replacement, and idle reaping."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from agenttrain.envs import make_env
from agenttrain.envs.workers import WorkerCrashed, WorkerPool


@pytest.fixture
def pool():
    pool = WorkerPool("textcraft", size=2)
    yield pool
    pool.shutdown()


async def test_sessions_spread_over_a_bounded_pool_and_match_in_process(pool):
    envs = [pool.environment() for _ in range(3)]
    firsts = [await env.reset(task) for env, task in zip(envs, (0, 1, 2), strict=True)]
    pids = {env.worker_pid for env in envs}
    assert len(pids) == 2 and os.getpid() not in pids  # bounded, and not this process
    local = make_env("textcraft")
    assert firsts[1].text == (await local.reset(1)).text
    result = await envs[1].step("inventory")
    assert result.observation == "Inventory: You are not carrying anything."
    assert pool.stats()["sessions"] == 3
    for env in envs:
        await env.close()
    assert pool.stats()["sessions"] == 0


async def test_a_killed_worker_fails_only_its_sessions_and_is_replaced(pool):
    doomed, survivor = pool.environment(), pool.environment()
    await doomed.reset(0)
    await survivor.reset(1)
    assert doomed.worker_pid != survivor.worker_pid
    os.kill(doomed.worker_pid, signal.SIGKILL)
    with pytest.raises(WorkerCrashed, match=r"died \(killed by SIGKILL\).*reset to start"):
        await doomed.step("inventory")
    with pytest.raises(WorkerCrashed):  # and keeps saying so, clearly
        await doomed.step("inventory")
    assert (await survivor.step("inventory")).observation.startswith("Inventory")
    replacement = pool.environment()
    await replacement.reset(2)  # a fresh worker takes the dead one's place
    assert pool.stats()["workers"] == 2 and pool.stats()["workers_crashed"] == 1
    await doomed.reset(3)  # a reset starts the lost episode afresh on a live worker
    assert (await doomed.step("inventory")).observation.startswith("Inventory")


async def test_idle_workers_are_stopped_and_their_memory_returned():
    pool = WorkerPool("textcraft", size=1, idle_s=0.2)
    try:
        env = pool.environment()
        await env.reset(0)
        pid = env.worker_pid
        await env.close()
        deadline = time.monotonic() + 10
        while pool.stats()["workers"] and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert pool.stats()["workers"] == 0
        while _alive(pid) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert not _alive(pid)
    finally:
        pool.shutdown()


async def test_a_closed_session_needs_a_reset(pool):
    env = pool.environment()
    await env.reset(0)
    await env.close()
    with pytest.raises(Exception, match="reset"):
        await env.step("inventory")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
