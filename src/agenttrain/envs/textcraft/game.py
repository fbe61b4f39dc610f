"""TextCraft's rules: `get`, `craft` and `inventory`, with AgentGym's exact observation strings.

Reference: agentgym.md section 4. Error observations reproduce AgentGym's text, including
its Python-repr of the failed target in "Could not find a valid recipe for ...", because
agents trained on AgentGym have seen exactly these strings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agenttrain.envs.textcraft.recipes import (
    Ingredient,
    Recipe,
    RecipeBook,
    display_name,
    item_id,
)

CRAFT = re.compile(r"craft (.*) using (.*)")
GET = re.compile(r"get ([0-9]+) (.*)")
INVENTORY = re.compile(r"inventory")
COUNTED = re.compile(r"([0-9]+) (.*)")


class ActionFailed(Exception):
    """An invalid action; its message is the observation the agent receives."""


REFUSALS = ("Could not ", "Wrong item format: ")
"""How every `ActionFailed` message begins: the game refused the action, nothing changed."""


NOT_ENOUGH = "Could not find enough items"
"""How the game refuses a craft whose ingredients the inventory lacks."""


def refused(observation: str) -> bool:
    """Whether `observation` is the game refusing an action (the state is unchanged)."""
    return observation.startswith(REFUSALS)


REFUSAL_KINDS = (
    (NOT_ENOUGH, "missing ingredients"),
    ("Could not find a valid recipe", "made-up recipe"),
    ("Could not find ", "refused get (craftable or unknown item)"),
    ("Could not execute", "unknown command"),
    ("Wrong item format: ", "wrong item format"),
)
"""Each refusal's opening words and its kind, most specific first."""


def refusal_kind(observation: str) -> str | None:
    """What the game refused an action for, in a few words; None when it did not refuse."""
    for opening, kind in REFUSAL_KINDS:
        if observation.startswith(opening):
            return kind
    return None


@dataclass(frozen=True)
class ItemRef:
    """A typed name resolved to either a tag or an item id (exactly one is set)."""

    tag: str | None = None
    item_id: str | None = None

    @property
    def name(self) -> str:
        return self.item_id or self.tag or ""

    def describe(self, count: int) -> str:
        # AgentGym prints the dataclass repr of the requested output; keep it byte-identical.
        return (
            f"ItemTagWithCount(item_tag=ItemTag(tag={self.tag!r}, item_id={self.item_id!r}), "
            f"count={count!r})"
        )


@dataclass(frozen=True)
class Outcome:
    observation: str
    reward: int = 0
    done: bool = False


class TextCraftGame:
    """The state of one episode: the goal and the inventory."""

    def __init__(self, book: RecipeBook, goal: str) -> None:
        self.book = book
        self.goal = goal
        self.inventory: dict[str, int] = {}

    def step(self, action: str) -> Outcome:
        try:
            if match := CRAFT.match(action):
                return self._craft(match.group(1), match.group(2))
            if match := GET.match(action):
                return self._get(match.group(2), int(match.group(1)))
            if INVENTORY.match(action):
                return Outcome(self.describe_inventory())
            raise ActionFailed(f"Could not execute {action}")
        except ActionFailed as failure:
            return Outcome(str(failure))

    def describe_inventory(self) -> str:
        if not self.inventory:
            return "Inventory: You are not carrying anything."
        return "Inventory: " + "".join(
            f"[{display_name(item)}] ({count}) " for item, count in self.inventory.items()
        )

    def _ref(self, name: str) -> ItemRef:
        ident = item_id(name)
        return ItemRef(tag=ident) if ident in self.book.tags else ItemRef(item_id=ident)

    def _get(self, name: str, amount: int) -> Outcome:
        ref = self._ref(name)
        if (
            self.book.is_craftable(ref.name)
            or ref.item_id is None
            or ref.item_id not in self.book.items
        ):
            raise ActionFailed(f"Could not find {name}")
        self._add(ref.item_id, amount)
        won = ref.item_id == self.goal
        return Outcome(f"Got {amount} {name}", reward=int(won), done=won)

    def _craft(self, target: str, ingredients: str) -> Outcome:
        if match := COUNTED.match(target):
            output, requested = self._ref(match.group(2)), int(match.group(1))
        else:
            output, requested = self._ref(target), 1
        given = self._given(ingredients)
        if self._short(given):
            raise ActionFailed(f"{NOT_ENOUGH} to craft {output.item_id}")
        recipe = self._matching_recipe(output.item_id, given)
        if recipe is None:
            raise ActionFailed(f"Could not find a valid recipe for {output.describe(requested)}")
        for ref, count in given:
            self._remove(ref.item_id, count)
        self._add(recipe.output, recipe.output_count)
        won = recipe.output == self.goal
        return Outcome(f"Crafted {recipe.output_count} {recipe.output}", reward=int(won), done=won)

    def lacking(self, action: str) -> list[str]:
        """The ingredients (item ids, or tags where a tag was typed) that a `craft` action
        names and the inventory holds too few of: what the game refuses it for. [] for any
        other action and for a craft whose ingredients are malformed."""
        match = CRAFT.match(action)
        if not match:
            return []
        try:
            return [ref.name for ref in self._short(self._given(match.group(2)))]
        except ActionFailed:
            return []

    def uncraftable_get(self, action: str) -> str | None:
        """The item id a `get` action asks for that must be crafted instead ("Could not find
        blaze powder"): what the game refuses that `get` for. None for any other action."""
        match = GET.match(action)
        if not match:
            return None
        ref = self._ref(match.group(2))
        return ref.name if self.book.is_craftable(ref.name) else None

    def _given(self, ingredients: str) -> list[tuple[ItemRef, int]]:
        """`2 oak planks, 1 stick` as (item, count) pairs; ActionFailed if malformed."""
        given: list[tuple[ItemRef, int]] = []
        for part in ingredients.split(","):
            match = COUNTED.match(part.strip())
            if not match:
                raise ActionFailed(f"Wrong item format: {part.strip()}")
            given.append((self._ref(match.group(2)), int(match.group(1))))
        return given

    def _short(self, given: list[tuple[ItemRef, int]]) -> list[ItemRef]:
        """The given ingredients the inventory lacks (a typed tag is never held as such)."""
        return [
            ref
            for ref, count in given
            if ref.item_id not in self.inventory or self.inventory[ref.item_id] < count
        ]

    def _matching_recipe(
        self, output: str | None, given: list[tuple[ItemRef, int]]
    ) -> Recipe | None:
        """The first recipe of `output` whose inputs the given ones match one-to-one.

        A tag input is matched by an item of that tag; counts must be equal, and no
        given input may be left over (AgentGym's rule).
        """
        for recipe in self.book.item_recipes.get(output or "", ()):
            remaining = list(given)
            for ingredient in recipe.inputs:
                index = next(
                    (i for i, (ref, _) in enumerate(remaining) if self._fits(ingredient, ref)),
                    None,
                )
                if index is None or remaining[index][1] != ingredient.count:
                    break
                del remaining[index]
            else:
                if not remaining:
                    return recipe
        return None

    def _fits(self, ingredient: Ingredient, ref: ItemRef) -> bool:
        if not ingredient.is_tag:
            return ref.item_id == ingredient.name
        tag = ingredient.name
        return ref.tag == tag or self.book.tag_of.get(ref.item_id or "") == tag

    def _add(self, item: str, amount: int) -> None:
        self.inventory[item] = self.inventory.get(item, 0) + amount

    def _remove(self, item: str | None, amount: int) -> None:
        assert item is not None  # checked by the inventory test before crafting
        self.inventory[item] -= amount
        if self.inventory[item] == 0:
            del self.inventory[item]
