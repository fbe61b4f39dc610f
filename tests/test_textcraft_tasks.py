"""Every TextCraft task id shows the same goal and commands everywhere; splits are fixed."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from agenttrain.envs import get_spec
from agenttrain.envs.textcraft.oracle import goal_from_observation
from agenttrain.envs.textcraft.recipes import RecipeBook, default_book, recipe_dir
from agenttrain.envs.textcraft.tasks import MAX_DISTRACTORS, build_task, task

TABLE_SCRIPT = """
import hashlib, json
from agenttrain.envs.textcraft.tasks import task, splits
table = [[t.goal, t.depth, list(t.commands)] for t in (task(i) for i in range(544))]
print(hashlib.sha256(json.dumps([table, splits()]).encode()).hexdigest())
"""

# The whole task table and the splits, pinned: a change here changes every published number.
PINNED_TABLE_SHA256 = "ea2afbf532cc75a06f81de860c9f6ce30dab76728a21d882911bfb54aebfa784"


def table_digest() -> str:
    table = [[t.goal, t.depth, list(t.commands)] for t in (task(i) for i in range(544))]
    return hashlib.sha256(json.dumps(table).encode()).hexdigest()


def test_task_table_is_pinned():
    assert table_digest() == PINNED_TABLE_SHA256


def test_task_table_does_not_depend_on_hash_seed():
    digests = set()
    for seed in ("0", "1", "12345"):
        result = subprocess.run(
            [sys.executable, "-c", TABLE_SCRIPT],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        )
        digests.add(result.stdout.strip())
    assert len(digests) == 1


def test_tasks_do_not_depend_on_reset_order_or_concurrency():
    book = RecipeBook.load(recipe_dir())  # a fresh book: no cached state shared with task()
    ids = list(range(544))
    with ThreadPoolExecutor(8) as pool:
        built = list(pool.map(lambda i: build_task(book, i), reversed(ids)))
    concurrent = {t.task_id: t for t in built}
    assert all(concurrent[i] == task(i) for i in ids)


def test_known_goals():
    assert task(0).goal == "minecraft:acacia_planks"
    assert task(12).goal == "minecraft:bread"
    assert task(543).goal == "minecraft:purple_banner" and task(543).depth == 4
    assert task(544) == task(0)  # ids wrap around like AgentGym's data_idx % 544


def test_observation_format_and_commands():
    chosen = task(543)
    text = chosen.observation
    assert text.startswith("Crafting commands:\n")
    assert text.endswith("\n\nGoal: craft purple banner.")
    assert goal_from_observation(text) == "minecraft:purple_banner"
    book = default_book()
    needed = {r.command for r in book.recipe_tree(chosen.goal)}
    shown = set(chosen.commands)
    assert needed <= shown
    assert 0 < len(shown - needed) <= MAX_DISTRACTORS
    assert len(chosen.commands) == len(shown)  # no duplicates


def test_splits_are_disjoint_complete_and_stratified_like_agentgym():
    spec = get_spec("textcraft")
    splits = spec.splits()
    train, val, test = (set(splits[name]) for name in ("train", "val", "test"))
    assert (len(train), len(val), len(test)) == (400, 44, 100)
    assert not (train & val or train & test or val & test)
    assert train | val | test == set(range(544))
    depths = [task(i).depth for i in splits["test"]]
    assert {d: depths.count(d) for d in (1, 2, 3, 4)} == {1: 31, 2: 41, 3: 25, 4: 3}


def test_a_task_is_described_by_goal_depth_and_its_recipes_fewest_ingredient_kinds():
    """What `agenttrain compare --by ingredients` groups by: a goal whose recipe lists two
    ingredients is a harder copy for a small model than one that lists one."""
    describe = get_spec("textcraft").describe
    assert describe is not None

    def described(goal: str) -> dict[str, object]:
        return describe(f"Crafting commands:\ncraft 1 x using 1 y\n\nGoal: craft {goal}.")

    assert described("dropper") == {"goal": "dropper", "depth": 1, "ingredients": 2}
    assert described("beacon")["ingredients"] == 3
    assert described("oak planks")["ingredients"] == 1
    # white dye has two recipes of one ingredient each; light blue dye one of 1 and one of 2
    assert described("white dye")["ingredients"] == 1
    assert described("light blue dye")["ingredients"] == 1
    assert describe("Got 1 oak logs") == {}
