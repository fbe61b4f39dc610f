"""Whether a TextCraft episode answered each refused craft by going after what it lacked.

After SFT on demonstrations that recover from a refused craft, and more so after GRPO with
the loop penalty, the policy no longer repeats a refused craft: it fetches something, but in
two cases of three an ingredient it already holds (docs/results.md). The loop penalty cannot
tell that apart from the right fetch. This count can: after a craft refused for lacking
ingredients, the next action (an `inventory` check aside) recovers when it adds to the
inventory an item on the way to what was lacking: the lacking item itself, a member of a
lacking tag, or any item of its crafting tree (the logs for the planks a stick lacks).

The episode is replayed from its actions (the game is deterministic), so this works for
episodes played through any server.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from agenttrain.envs.textcraft.game import INVENTORY, NOT_ENOUGH, TextCraftGame
from agenttrain.envs.textcraft.recipes import RecipeBook, default_book
from agenttrain.envs.textcraft.tasks import task


def recoveries(task_id: int, actions: Sequence[str]) -> tuple[int, int]:
    """(crafts refused for lacking ingredients and followed by another action, those whose
    next action other than an inventory check added an item on the way to what was lacking)."""
    game = TextCraftGame(default_book(), task(task_id).goal)
    refusals = recovered = 0
    wanted: frozenset[str] | None = None
    for action in actions:
        if wanted is not None and INVENTORY.fullmatch(action.strip()):
            continue
        before, lacking = dict(game.inventory), game.lacking(action)
        observation = game.step(action).observation
        if wanted is not None:
            refusals += 1
            recovered += bool(wanted & gained(before, game.inventory))
        wanted = None
        if observation.startswith(NOT_ENOUGH):
            wanted = frozenset().union(*(on_the_way(game.book, name) for name in lacking))
    return refusals, recovered


def gained(before: dict[str, int], after: dict[str, int]) -> set[str]:
    """Items `after` holds more of than `before`."""
    return {item for item, count in after.items() if count > before.get(item, 0)}


@lru_cache(maxsize=4096)
def on_the_way(book: RecipeBook, name: str) -> frozenset[str]:
    """`name` (an item id or a tag), the members of a tag, and every item that a recipe in
    its crafting tree makes or takes (tags as their members)."""
    items = {name, *book.members(name)}
    for recipe in book.recipe_tree(name):
        items.add(recipe.output)
        for ingredient in recipe.inputs:
            items.add(ingredient.name)
            items.update(book.members(ingredient.name) if ingredient.is_tag else ())
    return frozenset(items)
