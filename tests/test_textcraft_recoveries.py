"""TextCraft's recovery count (reward.recovery_penalty): after a craft refused for lacking
ingredients, or a `get` of an item that must be crafted, does the next action go after what
was lacking? Replayed in the real game."""

from __future__ import annotations

import pytest

from agenttrain.envs.registry import get_spec
from agenttrain.envs.textcraft.game import TextCraftGame
from agenttrain.envs.textcraft.oracle import plan
from agenttrain.envs.textcraft.recipes import default_book
from agenttrain.envs.textcraft.recoveries import (
    REFUSED_CRAFT,
    REFUSED_GET,
    recoveries,
    refusal_outcomes,
)
from agenttrain.envs.textcraft.tasks import task


def task_of(goal: str) -> int:
    return [item for item, _ in default_book().goals()].index(goal)


COARSE_DIRT = task_of("minecraft:coarse_dirt")  # craft 4 coarse dirt using 2 dirt, 2 gravel
EARLY_DIRT = ["get 2 dirt", "craft 4 coarse dirt using 2 dirt, 2 gravel"]
BUTTON = task_of("minecraft:acacia_button")  # 1 acacia planks, made from acacia logs
EARLY_BUTTON = ["craft 1 acacia button using 1 acacia planks"]


def test_fetching_the_lacking_ingredient_recovers_and_fetching_a_held_one_does_not():
    assert recoveries(COARSE_DIRT, [*EARLY_DIRT, "get 2 gravel"]) == (1, 1)
    assert recoveries(COARSE_DIRT, [*EARLY_DIRT, "get 2 dirt"]) == (1, 0)  # already held
    assert recoveries(COARSE_DIRT, [*EARLY_DIRT, EARLY_DIRT[1]]) == (1, 0)  # the same craft
    assert recoveries(COARSE_DIRT, [*EARLY_DIRT, "get 1 ink sac"]) == (1, 0)  # off the tree


def test_fetching_or_crafting_on_the_way_to_a_lacking_intermediate_recovers():
    """The button lacks planks, which cannot be fetched: the logs they are made of are the
    right next step, and so is crafting the planks once the logs are held."""
    assert recoveries(BUTTON, [*EARLY_BUTTON, "get 1 acacia logs"]) == (1, 1)
    planks = "craft 4 acacia planks using 1 acacia logs"
    assert recoveries(BUTTON, ["get 1 acacia logs", *EARLY_BUTTON, planks]) == (1, 1)
    # crafting the planks without the logs is refused itself: gains nothing, and is a
    # refusal of its own, answered here by the logs
    assert recoveries(BUTTON, [*EARLY_BUTTON, planks, "get 1 acacia logs"]) == (2, 1)


def test_an_inventory_check_waits_for_the_next_move_and_a_last_refusal_is_not_counted():
    assert recoveries(COARSE_DIRT, [*EARLY_DIRT, "inventory", "get 2 gravel"]) == (1, 1)
    assert recoveries(COARSE_DIRT, [*EARLY_DIRT, "inventory", "get 2 dirt"]) == (1, 0)
    assert recoveries(COARSE_DIRT, EARLY_DIRT) == (0, 0)  # nothing came after it
    assert recoveries(COARSE_DIRT, [*EARLY_DIRT, "inventory"]) == (0, 0)


def test_a_get_of_an_item_that_must_be_crafted_is_answered_by_its_crafting_tree():
    """ "Could not find stick" lacks the stick: fetching what it is made of (logs) or
    crafting it recovers; the same `get` again or an unrelated fetch does not. Before
    2026-11-27 such `get`s were not counted, and failed episodes repeated them unpenalised."""
    assert recoveries(COARSE_DIRT, ["get 1 stick", "get 1 stick", "jump"]) == (2, 0)
    assert recoveries(COARSE_DIRT, ["get 1 stick", "get 1 oak logs"]) == (1, 1)
    assert recoveries(COARSE_DIRT, ["get 1 stick", "inventory", "get 2 gravel"]) == (1, 0)
    planks = ["get 1 oak logs", "craft 4 oak planks using 1 oak logs"]
    crafted = [*planks, "get 1 stick", "craft 4 stick using 2 oak planks"]
    assert recoveries(COARSE_DIRT, crafted) == (1, 1)
    assert refusal_outcomes(COARSE_DIRT, ["get 1 stick", *EARLY_DIRT, "get 2 gravel"]) == [
        (REFUSED_GET, False),
        (REFUSED_CRAFT, True),
    ]


def test_refusals_that_lack_nothing_are_not_counted():
    """An unknown command, a malformed craft and a `get` of an unknown item are refused
    too, but lack nothing to go after; the oracle is never refused."""
    others = ["jump", "craft 1 stick using two planks", "get 1 unobtainium", "get 2 gravel"]
    assert recoveries(COARSE_DIRT, others) == (0, 0)
    for task_id in (COARSE_DIRT, BUTTON, task_of("minecraft:wooden_pickaxe")):
        actions = [planned.action for planned in plan(task(task_id).goal)]
        assert recoveries(task_id, actions) == (0, 0)


@pytest.mark.parametrize("action", ["get 2 gravel", "get 2 dirt", "get 1 ink sac"])
def test_what_the_count_calls_lacking_is_what_the_game_refused_for(action):
    """The game's own check decides what a craft lacks (one place for the rule)."""
    game = TextCraftGame(default_book(), "minecraft:coarse_dirt")
    game.step("get 2 dirt")
    assert game.lacking(EARLY_DIRT[1]) == ["minecraft:gravel"]
    assert game.lacking("get 2 gravel") == [] and game.lacking("craft 1 x using two y") == []
    game.step(action)
    lacks = bool(game.lacking(EARLY_DIRT[1]))
    refused = game.step(EARLY_DIRT[1]).observation.startswith("Could not find enough")
    assert refused == lacks == (action != "get 2 gravel")


def test_textcraft_reports_recoveries_to_training():
    assert get_spec("textcraft").recoveries is recoveries
