"""An expert for TextCraft: plans from the crafting tree and emits only valid actions.

It reads the goal from the first observation, so it plays through an HTTP server as well
as in-process. It is the ground truth of the tests and the source of demonstrations.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

from agenttrain.envs.actions import Oracle, PlannedAction
from agenttrain.envs.base import Environment
from agenttrain.envs.textcraft.recipes import (
    Ingredient,
    Recipe,
    RecipeBook,
    default_book,
    display_name,
    item_id,
)

GOAL = re.compile(r"Goal: craft (.+)\.\s*$")


class UnsolvableGoal(ValueError):
    """The goal cannot be crafted from gettable items with the known recipes."""


def goal_from_observation(observation: str) -> str:
    """The goal item id named on the observation's last line ("Goal: craft X.")."""
    match = GOAL.search(observation)
    if not match:
        raise ValueError(f"no 'Goal: craft ...' line in observation: {observation[-200:]!r}")
    return item_id(match.group(1))


@dataclass
class Block:
    """An item the plan crafts: the amount it needs made, the listed recipe it uses, and its
    actions `[start, end)` (fetching and crafting its ingredients, then its own crafts)."""

    name: str
    amount: int
    command: str
    start: int
    end: int = -1


class _Planner:
    """Depth-first production plan with an inventory simulation.

    Units already set aside for a pending craft are reserved, so making a later input
    (e.g. sticks from planks) never eats an earlier one (the planks the goal needs).
    """

    def __init__(self, book: RecipeBook) -> None:
        self.book = book
        self.inventory: Counter[str] = Counter()
        self.reserved: Counter[str] = Counter()
        self.actions: list[PlannedAction] = []
        self.recipes: dict[str, tuple[str, str]] = {}
        """Display name of each crafted item -> (the listed recipe used, what it is for)."""
        self.crafted_inputs: dict[str, list[str]] = {}
        """Display name of each crafted item -> the display names of its inputs that are
        crafted too (the rest are fetched with `get`)."""
        self.blocks: list[Block] = []
        """Each item the plan crafts, and where its actions lie (in the order begun)."""
        self.from_stock: list[str] = []
        """Ingredients (ids) served wholly from units an earlier craft left over."""

    def ensure(self, item: str, amount: int, purpose: str) -> None:
        free = self.inventory[item] - self.reserved[item]
        if free < amount:
            self.produce(item, amount - free, purpose)
        else:
            self.from_stock.append(item)
        self.reserved[item] += amount

    def produce(self, item: str, amount: int, purpose: str) -> None:
        name = display_name(item)
        if not self.book.is_craftable(item):
            if item not in self.book.items:
                raise UnsolvableGoal(f"{name} can neither be crafted nor fetched")
            self.actions.append(
                PlannedAction(
                    f"I need {amount} {name} for {purpose}; it is a basic item, so I get it.",
                    f"get {amount} {name}",
                )
            )
            self.inventory[item] += amount
            return
        recipe = self.easiest_recipe(item)
        self.recipes.setdefault(name, (recipe.command, purpose))
        block = Block(name, amount, recipe.command, start=len(self.actions))
        self.blocks.append(block)
        crafts = math.ceil(amount / recipe.output_count)
        inputs = [(self.concrete(i, crafts), i.count) for i in recipe.inputs]
        self.crafted_inputs.setdefault(
            name, [display_name(c) for c, _ in inputs if self.book.is_craftable(c)]
        )
        for concrete, count in inputs:
            self.ensure(concrete, count * crafts, name)
        command = f"craft {recipe.output_count} {name} using " + ", ".join(
            f"{count} {display_name(concrete)}" for concrete, count in inputs
        )
        for n in range(crafts):
            batch = f" (batch {n + 1} of {crafts})" if crafts > 1 else ""
            self.actions.append(
                PlannedAction(f"I have the ingredients for {name}{batch}, so I craft it.", command)
            )
        for concrete, count in inputs:
            self.inventory[concrete] -= count * crafts
            self.reserved[concrete] -= count * crafts
        self.inventory[item] += recipe.output_count * crafts
        block.end = len(self.actions)

    def easiest_recipe(self, item: str) -> Recipe:
        recipes = self.book.item_recipes[item]
        return min(recipes, key=lambda r: max(self.book.depth(i.name) for i in r.inputs))

    def concrete(self, ingredient: Ingredient, crafts: int) -> str:
        """The item to use for an ingredient: itself, or the handiest member of its tag."""
        if not ingredient.is_tag:
            return ingredient.name
        members = [m for m in self.book.members(ingredient.name) if m in self.book.item_recipes]
        if not members:
            raise UnsolvableGoal(f"no craftable item counts as {display_name(ingredient.name)}")
        needed = ingredient.count * crafts
        in_stock = [m for m in members if self.inventory[m] - self.reserved[m] >= needed]
        return (in_stock or sorted(members, key=lambda m: (self.book.depth(m), m)))[0]


def _planned(goal: str, book: RecipeBook | None) -> _Planner:
    planner = _Planner(book or default_book())
    planner.produce(goal, 1, "the goal")
    return planner


def plan(goal: str, book: RecipeBook | None = None) -> list[PlannedAction]:
    """Actions (with a short thought each) that craft `goal` (an item id) from nothing."""
    return _planned(goal, book).actions


def recipes_used(goal: str, book: RecipeBook | None = None) -> dict[str, tuple[str, str]]:
    """Display name of each item the plan for `goal` crafts -> (its recipe as the task lists
    it, the item it is for, or "the goal")."""
    return _planned(goal, book).recipes


def crafted_ingredients(goal: str, book: RecipeBook | None = None) -> dict[str, list[str]]:
    """Display name of each item the plan for `goal` crafts -> those of its ingredients that
    the plan crafts too (the others are basic items, fetched with `get`)."""
    return _planned(goal, book).crafted_inputs


def crafting_blocks(
    goal: str, book: RecipeBook | None = None
) -> tuple[list[PlannedAction], list[Block], bool]:
    """The plan for `goal`, each item it crafts with where its actions lie (the goal first),
    and whether an ingredient comes wholly from an earlier craft's leftovers."""
    planner = _planned(goal, book)
    return planner.actions, planner.blocks, bool(planner.from_stock)


def plan_for_observation(observation: str, book: RecipeBook | None = None) -> list[PlannedAction]:
    """The plan for the task whose first observation is `observation`."""
    return plan(goal_from_observation(observation), book)


ORACLE = Oracle(task_marker="Goal: craft", plan=plan_for_observation)


@dataclass(frozen=True)
class OracleEpisode:
    task_id: int
    reward: float
    done: bool
    turns: int
    actions: tuple[str, ...]


async def play_episode(env: Environment, task_id: int, max_turns: int = 100) -> OracleEpisode:
    """Play one task with the oracle through any `Environment` (in-process or remote)."""
    first = await env.reset(task_id)
    actions: list[str] = []
    reward, done = 0.0, False
    for planned in plan_for_observation(first.text)[:max_turns]:
        result = await env.step(planned.action)
        actions.append(planned.action)
        reward, done = result.reward, result.done
        if done:
            break
    return OracleEpisode(task_id, reward, done, len(actions), tuple(actions))
