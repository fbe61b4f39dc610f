"""Many sessions at once through the HTTP server: no cross-talk, no leaked sessions."""

from __future__ import annotations

import asyncio

from agenttrain.envs import get_spec
from agenttrain.envs.textcraft.oracle import plan_for_observation, play_episode
from agenttrain.envs.textcraft.tasks import task
from agenttrain.serving.client import EnvServerPool
from support import health

SESSIONS = 128


async def test_oracle_solves_every_test_task_through_the_server(textcraft_url):
    test_ids = get_spec("textcraft").split("test")
    async with EnvServerPool("textcraft", textcraft_url) as pool:

        async def solve(task_id: int):
            async with pool.environment() as env:
                return await play_episode(env, task_id)

        episodes = await asyncio.gather(*(solve(t) for t in test_ids))
    unsolved = [e.task_id for e in episodes if not (e.done and e.reward == 1)]
    assert not unsolved


async def test_parallel_sessions_do_not_cross_talk_and_all_close(textcraft_url):
    baseline = health(textcraft_url)["sessions"]
    task_ids = [(i * 37) % 544 for i in range(SESSIONS)]  # distinct goals
    assert len(set(task_ids)) == SESSIONS
    async with EnvServerPool("textcraft", textcraft_url) as pool:
        envs = [pool.environment() for _ in task_ids]
        firsts = await asyncio.gather(
            *(env.reset(t) for env, t in zip(envs, task_ids, strict=True))
        )
        assert health(textcraft_url)["sessions"] == baseline + SESSIONS
        assert [f.text for f in firsts] == [task(t).observation for t in task_ids]

        async def finish(env, first) -> list[tuple[str, float, bool]]:
            outcomes = []
            for planned in plan_for_observation(first.text):
                result = await env.step(planned.action)
                outcomes.append((result.observation, result.reward, result.done))
            inventory = await env.step("inventory")
            return [*outcomes, (inventory.observation, inventory.reward, inventory.done)]

        # All sessions step interleaved; each must see exactly its own episode.
        results = await asyncio.gather(
            *(finish(env, f) for env, f in zip(envs, firsts, strict=True))
        )
        for task_id, outcomes in zip(task_ids, results, strict=True):
            goal = task(task_id).goal
            *steps, inventory = outcomes
            assert all(obs.startswith(("Got ", "Crafted ")) for obs, _, _ in steps), task_id
            assert steps[-1] == (f"Crafted {steps[-1][0].split()[1]} {goal}", 1, True)
            assert f"[{task(task_id).goal_name}]" in inventory[0]
        await asyncio.gather(*(env.close() for env in envs))
    assert health(textcraft_url)["sessions"] == baseline
