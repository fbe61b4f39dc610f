"""The oracle is the ground truth: it must solve every goal with valid actions only."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from agenttrain.agent.experts import OracleExpert
from agenttrain.agent.formats import get_format
from agenttrain.envs import Oracle, PlannedAction, get_spec, make_env, register
from agenttrain.envs.textcraft.game import TextCraftGame
from agenttrain.envs.textcraft.oracle import goal_from_observation, plan, play_episode
from agenttrain.envs.textcraft.recipes import default_book
from agenttrain.envs.textcraft.tasks import num_tasks, task
from agenttrain.policy.base import ChatMessage, SamplingParams
from support import CounterEnv


def test_oracle_crafts_every_goal_with_valid_actions_only():
    book = default_book()
    for task_id in range(num_tasks()):
        goal = task(task_id).goal
        game = TextCraftGame(book, goal)
        actions = plan(goal)
        outcomes = [game.step(a.action) for a in actions]
        invalid = [
            (a.action, o.observation)
            for a, o in zip(actions, outcomes, strict=True)
            if not o.observation.startswith(("Got ", "Crafted "))
        ]
        assert not invalid, f"task {task_id} ({goal}): {invalid}"
        assert outcomes[-1].done and outcomes[-1].reward == 1, f"task {task_id} not solved"
        assert not any(o.done for o in outcomes[:-1])


def test_oracle_reserves_ingredients_it_still_needs():
    # A wooden pickaxe needs 3 planks and 2 sticks, and sticks are made from planks: making
    # the sticks must not eat the planks already set aside for the pickaxe.
    actions = [a.action for a in plan("minecraft:wooden_pickaxe")]
    game = TextCraftGame(default_book(), "minecraft:wooden_pickaxe")
    assert [game.step(a) for a in actions][-1].reward == 1


def test_every_planned_action_carries_a_thought():
    assert all(p.thought.strip() for p in plan("minecraft:purple_banner"))


def test_oracle_plays_through_the_environment_protocol():
    episode = asyncio.run(play_episode(make_env("textcraft"), 543))
    assert episode.done and episode.reward == 1
    assert episode.turns == len(episode.actions) == len(plan("minecraft:purple_banner"))


def test_goal_parser_rejects_observations_without_a_goal():
    with pytest.raises(ValueError, match="Goal: craft"):
        goal_from_observation("Crafting commands:\ncraft 1 x using 1 y")


async def _expert_episode(expert: OracleExpert, env_name: str, task_id: int) -> float:
    """One episode of `expert` on an in-process environment, its reply parsed by the format."""
    env = make_env(env_name)
    first = await env.reset(task_id)
    conversation = [ChatMessage("user", first.text)]
    reward = 0.0
    for _ in range(100):
        [reply] = await expert.chat([conversation], SamplingParams())
        result = await env.step(expert.format.parse(reply.text).action)
        conversation += [
            ChatMessage("assistant", reply.text),
            ChatMessage("user", result.observation),
        ]
        reward = result.reward
        if result.done:
            break
    return reward


@pytest.mark.parametrize("action_format", ["react", "raw"])
def test_the_expert_finds_each_environments_oracle_through_its_spec(action_format):
    largest = OracleExpert("largest", get_format(action_format, "largest"))
    rewards = [asyncio.run(_expert_episode(largest, "largest", t)) for t in range(1100, 1300)]
    assert rewards == [1.0] * 200
    textcraft = OracleExpert(get_spec("textcraft"), get_format(action_format, "textcraft"))
    assert asyncio.run(_expert_episode(textcraft, "textcraft", 543)) == 1.0


def test_a_plugin_oracle_needs_no_change_to_the_expert():
    def plan(observation: str) -> list[PlannedAction]:
        return [PlannedAction("Counting up.", "up")] * int(observation.split()[-1])

    spec = dataclasses.replace(CounterEnv.spec, oracle=Oracle("count to", plan))
    register("counter-test", CounterEnv, spec=spec, replace=True)
    try:
        expert = OracleExpert("counter-test", get_format("raw", "counter-test"))
        conversation = [ChatMessage("user", "count to 2"), ChatMessage("assistant", "up")]
        assert expert.next_step(conversation) == PlannedAction("Counting up.", "up")
    finally:
        register("counter-test", CounterEnv, replace=True)
