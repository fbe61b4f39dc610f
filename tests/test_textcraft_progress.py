"""TextCraft's progress (partial credit in training): the share of a goal's intermediate
items an episode crafted, replayed from its actions."""

from __future__ import annotations

from agenttrain.envs.registry import get_spec
from agenttrain.envs.textcraft.oracle import plan
from agenttrain.envs.textcraft.progress import needed_intermediates, progress
from agenttrain.envs.textcraft.recipes import default_book


def task_of(goal: str) -> int:
    return [item for item, _ in default_book().goals()].index(goal)


def test_each_crafted_intermediate_item_earns_its_share():
    task = task_of("minecraft:wooden_pickaxe")  # needs sticks and planks, both crafted
    assert needed_intermediates("minecraft:wooden_pickaxe") == 2
    assert progress(task, []) == 0.0
    assert progress(task, ["get 2 bamboo"]) == 0.0  # fetching earns nothing
    sticks = ["get 2 bamboo", "craft 1 stick using 2 bamboo"]
    assert progress(task, sticks) == 0.5
    planks = ["get 1 oak logs", "craft 4 oak planks using 1 oak logs"]
    assert progress(task, sticks + planks) == 1.0
    assert progress(task, sticks + sticks) == 0.5  # one item twice is one share


def test_progress_grows_along_the_oracle_plan_of_a_deep_goal():
    goal = next(g for g, d in default_book().goals() if d == 3)
    task = task_of(goal)
    actions = [planned.action for planned in plan(goal)]
    curve = [progress(task, actions[:k]) for k in range(len(actions) + 1)]
    assert curve[0] == 0.0 and curve[-1] == 1.0
    assert curve == sorted(curve) and len(set(curve)) == needed_intermediates(goal) + 1


def test_another_plank_type_counts_and_failed_actions_do_not():
    task = task_of("minecraft:crafting_table")  # any planks make it; the oracle's are acacia
    birch = ["get 1 birch logs", "craft 4 birch planks using 1 birch logs"]
    assert progress(task, birch) == 1.0
    wrong = ["get 1 oak logs", "craft 4 oak planks using 2 oak logs", "craft stick", "inventory"]
    assert progress(task, wrong) == 0.0
    off_tree = ["get 1 iron ingot", "craft 9 iron nugget using 1 iron ingot"]
    assert progress(task, off_tree) == 0.0  # an item the goal does not need


def test_depth_one_goals_have_no_partial_credit():
    goal = next(g for g, d in default_book().goals() if d == 1)
    actions = [planned.action for planned in plan(goal)]
    assert progress(task_of(goal), actions[:-1]) == 0.0


def test_the_spec_exposes_progress_for_training():
    assert get_spec("textcraft").progress is progress
    assert get_spec("largest").progress is None
