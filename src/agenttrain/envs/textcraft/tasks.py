"""TextCraft tasks: the goal and crafting commands of every task id, and the published splits.

A task id selects goal `goals[id % 544]` as in AgentGym. The commands shown are the goal's
whole recipe tree plus up to 10 distractor recipes, shuffled. AgentGym draws the
distractors and the order from the process-global `random` and iterates Python sets of
strings, so the list changed with PYTHONHASHSEED and with concurrent resets. Here every
choice is a pure function of (task, purpose, candidate): candidates are ranked by a keyed
hash, so a task looks the same on every machine, in every run, in any order of resets.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

from agenttrain.envs.textcraft.recipes import RecipeBook, default_book, display_name

MAX_DISTRACTORS = 10
"""Distractor recipes shown per task, and sampled per ingredient (AgentGym: 10 and 10)."""

TEST_PER_DEPTH = {1: 31, 2: 41, 3: 25, 4: 3}
"""Test split size per crafting depth: the same strata as AgentGym's 100-task test set."""

VAL_EVERY = 10
"""Every 10th non-test task (per depth) is held out for validation during training."""


@dataclass(frozen=True)
class TextCraftTask:
    task_id: int
    goal: str
    """Item id of the goal, e.g. `minecraft:cyan_banner`."""
    depth: int
    commands: tuple[str, ...]

    @property
    def goal_name(self) -> str:
        return display_name(self.goal)

    @property
    def observation(self) -> str:
        """The first observation, in AgentGym's exact format."""
        commands = "\n".join(self.commands)
        return f"Crafting commands:\n{commands}\n\nGoal: craft {self.goal_name}."


def ranked(candidates: Iterable[str], key: str) -> list[str]:
    """Candidates in a pseudo-random order that depends only on `key` and the candidates."""

    def rank(candidate: str) -> bytes:
        return hashlib.blake2b(f"{key}\x00{candidate}".encode(), digest_size=8).digest()

    return sorted(candidates, key=rank)


def build_task(book: RecipeBook, task_id: int) -> TextCraftTask:
    """The task for `task_id` (taken modulo the goal count, as AgentGym does)."""
    goals = book.goals()
    index = task_id % len(goals)
    goal, depth = goals[index]
    tree = book.recipe_tree(goal)
    needed = list(dict.fromkeys(r.command for r in tree))
    needed_set = set(needed)

    distractors: dict[str, None] = {}
    for recipe in tree:
        for ingredient in recipe.inputs:
            uses = {r.command for r in book.uses.get(ingredient.name, ())}
            for command in ranked(uses, f"{index}/uses/{ingredient.name}")[:MAX_DISTRACTORS]:
                if command not in needed_set:
                    distractors[command] = None
    shown = ranked(distractors, f"{index}/distractors")[:MAX_DISTRACTORS]
    commands = tuple(ranked(needed + shown, f"{index}/order"))
    return TextCraftTask(index, goal, depth, commands)


def task(task_id: int) -> TextCraftTask:
    """The task for `task_id` from the shared recipe book."""
    return _task(task_id % num_tasks())


@cache
def _task(index: int) -> TextCraftTask:
    return build_task(default_book(), index)


@cache
def num_tasks() -> int:
    return len(default_book().goals())


def _evenly_spaced(ids: list[int], k: int) -> list[int]:
    n = len(ids)
    return [ids[(2 * i + 1) * n // (2 * k)] for i in range(k)]


@cache
def splits() -> dict[str, tuple[int, ...]]:
    """`test` (100 tasks, stratified by depth like AgentGym's), `val` and `train` (the rest).

    Ids are sorted by depth, so each depth is a contiguous band; test tasks are spread
    evenly across each band rather than taken from its start.
    """
    by_depth: dict[int, list[int]] = {}
    for task_id, (_, depth) in enumerate(default_book().goals()):
        by_depth.setdefault(depth, []).append(task_id)
    test: list[int] = []
    val: list[int] = []
    for depth, ids in sorted(by_depth.items()):
        chosen = _evenly_spaced(ids, min(TEST_PER_DEPTH.get(depth, 0), len(ids)))
        test += chosen
        rest = [i for i in ids if i not in set(chosen)]
        val += rest[VAL_EVERY // 2 :: VAL_EVERY]
    held_out = set(test) | set(val)
    train = [i for i in range(num_tasks()) if i not in held_out]
    return {"train": tuple(train), "val": tuple(sorted(val)), "test": tuple(sorted(test))}
