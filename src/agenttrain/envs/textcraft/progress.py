"""How far an unsolved TextCraft episode got: the share of its goal's intermediate items crafted.

A depth-2 or deeper goal is out of reach of a small model for most of training, so every one
of a group's episodes fails and GRPO learns nothing from it. Partial credit for the
intermediate items on the way (the planks before the sticks) gives such groups reward
variance. The count is the oracle plan's: a goal needs as many distinct intermediate items
as its plan crafts, and any item a recipe in the goal's crafting tree makes counts towards
it (another plank type than the oracle's works as well). Basic items (`get`) earn nothing:
fetching is free and would be rewarded for its own sake.

The episode is replayed from its actions (the game is deterministic), so this works for
episodes played through any server.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from agenttrain.envs.textcraft.game import COUNTED, CRAFT, TextCraftGame
from agenttrain.envs.textcraft.oracle import plan
from agenttrain.envs.textcraft.recipes import default_book, item_id
from agenttrain.envs.textcraft.tasks import task


@lru_cache(maxsize=1024)
def needed_intermediates(goal: str) -> int:
    """How many distinct items other than `goal` the oracle's plan crafts."""
    crafted = set()
    for planned in plan(goal):
        if match := CRAFT.match(planned.action):
            counted = COUNTED.match(match.group(1))
            crafted.add(item_id(counted.group(2) if counted else match.group(1)))
    return len(crafted - {goal})


@lru_cache(maxsize=1024)
def tree_items(goal: str) -> frozenset[str]:
    """Every item a recipe in `goal`'s crafting tree makes, `goal` excluded."""
    return frozenset(recipe.output for recipe in default_book().recipe_tree(goal)) - {goal}


def progress(task_id: int, actions: Sequence[str]) -> float:
    """The share (0 to 1) of the goal's intermediate items the actions crafted; 0 for a goal
    crafted straight from basic items (depth 1)."""
    goal = task(task_id).goal
    needed = needed_intermediates(goal)
    if not needed:
        return 0.0
    game = TextCraftGame(default_book(), goal)
    held: set[str] = set()
    for action in actions:
        game.step(action)
        held |= game.inventory.keys()
    return min(len(held & tree_items(goal)), needed) / needed
