"""Whether a TextCraft episode answered each refusal by going after what it lacked.

After SFT on demonstrations that recover from a refused craft, and more so after GRPO with
the loop penalty, the policy no longer repeats a refused craft: it fetches something, but in
two cases of three an ingredient it already holds (docs/results.md). The loop penalty cannot
tell that apart from the right fetch. This count can: after a craft refused for lacking
ingredients, the next action (an `inventory` check aside) recovers when it adds to the
inventory an item on the way to what was lacking: the lacking item itself, a member of a
lacking tag, or any item of its crafting tree (the logs for the planks a stick lacks).

A `get` of an item that must be crafted ("Could not find blaze powder") lacks that item: the
next move recovers when it adds an item of its crafting tree (the blaze rod), or crafts it.
After GRPO with both penalties, such `get`s sent again until the turn limit were what the
failed episodes did (docs/results.md, 2026-11-27); crafts-only counts are `REFUSED_CRAFT`'s.

The episode is replayed from its actions (the game is deterministic), so this works for
episodes played through any server.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from agenttrain.envs.textcraft.game import INVENTORY, TextCraftGame, refused
from agenttrain.envs.textcraft.recipes import RecipeBook, default_book, display_name
from agenttrain.envs.textcraft.tasks import task

REFUSED_CRAFT = "craft"
"""A craft refused for lacking ingredients."""
REFUSED_GET = "get"
"""A `get` of an item that must be crafted."""


def recoveries(task_id: int, actions: Sequence[str]) -> tuple[int, int]:
    """(refusals that lacked something and were followed by another action, those whose
    next action other than an inventory check added an item on the way to what was lacking)."""
    outcomes = refusal_outcomes(task_id, actions)
    return len(outcomes), sum(recovered for _, recovered in outcomes)


def refusal_outcomes(task_id: int, actions: Sequence[str]) -> list[tuple[str, bool]]:
    """(`REFUSED_CRAFT` or `REFUSED_GET`, whether the next move recovered) for each such
    refusal followed by another action, in order."""
    game = TextCraftGame(default_book(), task(task_id).goal)
    outcomes: list[tuple[str, bool]] = []
    pending: tuple[str, frozenset[str]] | None = None
    for action in actions:
        if pending is not None and INVENTORY.fullmatch(action.strip()):
            continue
        before, lacking = dict(game.inventory), _lacking(game, action)
        observation = game.step(action).observation
        if pending is not None:
            kind, wanted = pending
            outcomes.append((kind, bool(wanted & gained(before, game.inventory))))
        pending = None
        if lacking is not None and refused(observation):
            kind, names = lacking
            pending = kind, frozenset().union(*(on_the_way(game.book, name) for name in names))
    return outcomes


def _lacking(game: TextCraftGame, action: str) -> tuple[str, list[str]] | None:
    """What `action` lacks, should the game refuse it: a craft's missing ingredients, or the
    item a `get` asks for that must be crafted; None if it lacks nothing."""
    if missing := game.lacking(action):
        return REFUSED_CRAFT, missing
    if item := game.uncraftable_get(action):
        return REFUSED_GET, [item]
    return None


def inventory_states(task_id: int, actions: Sequence[str]) -> list[str]:
    """The inventory before each action and after the last, as text (`EnvSpec.states`)."""
    game = TextCraftGame(default_book(), task(task_id).goal)
    states = [_held(game)]
    for action in actions:
        game.step(action)
        states.append(_held(game))
    return states


def _held(game: TextCraftGame) -> str:
    held = sorted(game.inventory.items())
    return ", ".join(f"{count} {display_name(item)}" for item, count in held if count)


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
