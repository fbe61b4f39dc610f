"""TextCraft's rules and observation strings, as AgentGym defines them (agentgym.md section 4)."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from agenttrain.envs import EnvironmentNotReset, make_env
from agenttrain.envs.textcraft.game import TextCraftGame
from agenttrain.envs.textcraft.recipes import default_book


@pytest.fixture
def game() -> TextCraftGame:
    return TextCraftGame(default_book(), "minecraft:stick")


def test_recipe_book_matches_agentgym_counts():
    book = default_book()
    goals = book.goals()
    assert len(goals) == 544
    assert len(book.tag_recipes) == 39
    assert len(book.items) == 676
    assert len(book.tags) == 23
    # Depth histogram for sorted recipe files (agentgym.md: 125, 291, 117, 11).
    assert Counter(depth for _, depth in goals) == {1: 125, 2: 291, 3: 117, 4: 11}
    assert [d for _, d in goals] == sorted(d for _, d in goals)


def test_crafting_yields_the_recipe_output_count(game):
    assert game.step("get 1 oak logs").observation == "Got 1 oak logs"
    assert game.step("craft 4 oak planks using 1 oak logs").observation == (
        "Crafted 4 minecraft:oak_planks"
    )
    assert game.inventory == {"minecraft:oak_planks": 4}


def test_goal_crafted_gives_reward_one_and_done(game):
    game.step("get 1 oak logs")
    game.step("craft 4 oak planks using 1 oak logs")
    outcome = game.step("craft 4 stick using 2 oak planks")
    assert (outcome.observation, outcome.reward, outcome.done) == (
        "Crafted 4 minecraft:stick",
        1,
        True,
    )
    # AgentGym accepts steps after done.
    assert game.step("inventory").observation == "Inventory: [oak planks] (2) [stick] (4) "


def test_ingredient_counts_must_match_exactly(game):
    game.step("get 1 oak logs")
    game.step("craft 4 oak planks using 1 oak logs")
    outcome = game.step("craft 1 stick using 1 oak planks")
    assert outcome.observation == (
        "Could not find a valid recipe for ItemTagWithCount(item_tag=ItemTag(tag=None, "
        "item_id='minecraft:stick'), count=1)"
    )
    assert outcome.reward == 0 and not outcome.done
    assert game.inventory == {"minecraft:oak_planks": 4}


def test_generic_tag_ingredient_must_be_a_concrete_item(game):
    game.step("get 1 oak logs")
    game.step("craft 4 oak planks using 1 oak logs")
    assert game.step("craft 4 stick using 2 planks").observation == (
        "Could not find enough items to craft minecraft:stick"
    )


def test_leftover_inputs_make_a_craft_fail(game):
    game.step("get 1 oak logs")
    game.step("craft 4 oak planks using 1 oak logs")
    game.step("get 1 cobblestone")
    outcome = game.step("craft 4 stick using 2 oak planks, 1 cobblestone")
    assert outcome.observation.startswith("Could not find a valid recipe for")


def test_invalid_actions_get_agentgym_error_observations(game):
    assert game.step("get 1 oak planks").observation == "Could not find oak planks"
    assert game.step("get 1 cactus").observation == "Could not find cactus"
    assert game.step("get 2 planks").observation == "Could not find planks"
    assert game.step("look").observation == "Could not execute look"
    assert game.step("craft 1 stick using oak planks").observation == (
        "Wrong item format: oak planks"
    )
    assert game.step("craft 1 planks using 1 oak logs").observation == (
        "Could not find enough items to craft None"
    )
    assert game.step("inventory").observation == "Inventory: You are not carrying anything."


def test_tag_output_is_reported_with_agentgym_repr():
    game = TextCraftGame(default_book(), "minecraft:stick")
    game.step("get 1 oak logs")
    assert game.step("craft 4 planks using 1 oak logs").observation == (
        "Could not find a valid recipe for ItemTagWithCount(item_tag=ItemTag("
        "tag='minecraft:planks', item_id=None), count=4)"
    )


def test_inventory_lists_items_in_acquisition_order(game):
    game.step("get 2 cobblestone")
    game.step("get 1 oak logs")
    game.step("get 1 cobblestone")
    assert game.step("inventory").observation == "Inventory: [cobblestone] (3) [oak logs] (1) "


def test_in_process_environment_refuses_step_before_reset():
    env = make_env("textcraft")
    with pytest.raises(EnvironmentNotReset):
        asyncio.run(env.step("inventory"))


def test_in_process_environment_reports_inventory_and_task_details():
    async def episode():
        env = make_env("textcraft")
        first = await env.reset(12)
        step = await env.step("get 3 wheat")
        return first, step

    first, step = asyncio.run(episode())
    assert first.text.endswith("Goal: craft bread.")
    assert first.info == {"task_id": 12, "goal": "bread", "depth": 1}
    assert step.info["inventory"] == {"wheat": 3}
    assert step.reward == 0.0 and step.done is False
