"""BabyAI in-process: AgentGym's task mapping, text view, actions, rewards, and each of
AgentGym's defects fixed by default and kept with `agentgym_compat=True`."""

from __future__ import annotations

import numpy as np
import pytest
from minigrid.core.constants import COLOR_TO_IDX, OBJECT_TO_IDX

from agenttrain.envs import get_spec, make_env
from agenttrain.envs.babyai.game import BabyAIGame, EpisodeFinished
from agenttrain.envs.babyai.levels import LEVELS, splits, task
from agenttrain.envs.babyai.view import Pose, render

COMPLETED = "\n The task is completed."


def game(task_id: int, compat: bool = False) -> BabyAIGame:
    return BabyAIGame(task(task_id), agentgym_compat=compat)


def action_list(observation: str) -> list[str]:
    line = observation.rsplit("\n", 1)[1]
    assert line.startswith("Available actions: [") and line.endswith("]")
    return [a.strip('"') for a in line[len("Available actions: [") : -1].split(", ")]


def first_with(prefix: str, task_ids, compat: bool = False) -> tuple[BabyAIGame, str]:
    """The first task whose opening actions include one starting with `prefix`."""
    for task_id in task_ids:
        played = game(task_id, compat)
        found = [a for a in played.view.actions if a.startswith(prefix)]
        if found:
            return played, found[0]
    raise AssertionError(f"no task among {task_ids} offers {prefix!r}")


def test_task_ids_map_to_agentgym_level_and_seed():
    assert (task(0).level.number, task(0).seed) == (1, 0)
    assert (task(81).level.gym_id, task(81).seed) == ("BabyAI-GoToRedBall-v0", 2)
    assert (task(39).level.gym_id, task(79).seed) == ("BabyAI-BossLevelNoUnlock-v0", 1)
    assert [level.number for level in LEVELS] == list(range(1, 41))
    with pytest.raises(ValueError, match="0 or more"):
        task(-1)


def test_a_task_is_the_level_reset_twice_with_its_seed():
    played = game(41)
    level = LEVELS[1].build()
    level.reset(seed=1)
    level.reset(seed=1)
    assert played.env.mission == level.mission
    assert np.array_equal(played.env.grid.encode(), level.grid.encode())
    assert tuple(played.env.agent_pos) == tuple(level.agent_pos)


def test_splits_are_disjoint_and_test_has_agentgyms_category_mix():
    parts = splits()
    assert (len(parts["train"]), len(parts["val"]), len(parts["test"])) == (810, 80, 90)
    assert not set(parts["train"]) & set(parts["test"])
    assert not set(parts["val"]) & (set(parts["train"]) | set(parts["test"]))
    mix: dict[str, int] = {}
    for task_id in parts["test"]:
        category = task(task_id).level.category
        mix[category] = mix.get(category, 0) + 1
    assert mix == {"GoTo": 55, "Pickup": 15, "AOD": 5, "Find": 5, "Room": 5, "SLoc": 5}


async def test_first_observation_is_goal_view_and_action_list():
    env = make_env("babyai")
    first = await env.reset(0)
    goal, description, actions = first.text.split("\n")
    assert goal == "Your goal: go to the red ball"
    assert description.startswith("In front of you in this room, you can see several objects: ")
    assert description.endswith("You are not carrying anything.")
    assert actions.startswith('Available actions: ["turn left", "turn right"')
    assert action_list(first.text)[-1] == "check available actions"
    assert first.info["level_name"] == "BabyAI-GoToRedBallGrey-v0"
    assert first.info["category"] == "GoTo" and first.info["score"] == 0


def test_objects_are_numbered_per_name_nearest_first():
    played = game(0)  # grey keys and balls around a red ball
    text = played.view.description
    numbers: dict[str, list[int]] = {}
    for sentence in text.split("There is a ")[1:]:
        words = sentence.split()
        name, number = " ".join(words[:2]), int(words[2])
        numbers.setdefault(name, []).append(number)
    assert numbers and all(n == list(range(1, len(n) + 1)) for n in numbers.values())


def test_go_to_ends_facing_the_object_and_pickup_carries_it():
    played, action = first_with("go to ", range(0, 40 * 5, 40))
    name = action.removeprefix("go to ").rsplit(" ", 1)[0]
    played.step(action)
    env = played.env
    facing = env.grid.get(*env.front_pos)
    assert f"{facing.color} {facing.type}" == name

    played, action = first_with("pickup ", range(16, 16 + 40 * 5, 40))
    name = action.removeprefix("pickup ").rsplit(" ", 1)[0]
    played.step(action)
    assert f"{played.env.carrying.color} {played.env.carrying.type}" == name
    assert played.view.description.endswith(f"You are carrying a {name}.")


def test_success_reward_is_minigrids_and_ends_the_episode():
    played = game(0)
    outcome = played.step("go to red ball 1")
    env = played.env
    assert outcome.done and outcome.text.endswith(COMPLETED)
    assert outcome.reward == pytest.approx(1 - 0.9 * env.step_count / env.max_steps)
    assert outcome.score == outcome.reward
    with pytest.raises(EpisodeFinished):
        played.step("turn left")


@pytest.mark.parametrize("compat", [False, True])
def test_invalid_actions_answer_agentgyms_texts_and_change_nothing(compat):
    played = game(0, compat)
    before = (tuple(played.env.agent_pos), played.env.agent_dir, played.env.step_count)
    texts = {
        "": "No change in state.",
        "fly away": "The action is not recognized. Please check valid actions.",
        "drop": "You cannot drop the object, as you are not carrying anything.",
    }
    for action, text in texts.items():
        outcome = played.step(action)
        assert outcome.text == text and not outcome.moved and outcome.reward == 0
    check = played.step("check available actions")
    assert check.text == "You can take the following actions: " + ", ".join(played.view.actions)
    assert before == (tuple(played.env.agent_pos), played.env.agent_dir, played.env.step_count)
    assert played.observation(texts["fly away"]).endswith(
        "\nAvailable actions: [" + ", ".join(f'"{a}"' for a in played.view.actions) + "]"
    )


def test_refusals_name_the_reason():
    played, action = first_with("toggle and go through ", range(11, 11 + 40 * 5, 40))
    door = action.removeprefix("toggle and go through ")
    assert played.step(f"go through {door}").text == (
        f"You cannot go through {door}, as it is closed. You should toggle it first."
    )
    for _ in range(50):  # walk until a wall or box is right ahead
        if "move forward" not in played.view.actions:
            break
        where = tuple(played.env.agent_pos)
        played.step("move forward")
        if tuple(played.env.agent_pos) == where:  # a door or an object in the way
            played.step("turn left")
    assert played.step("move forward").text == (
        "There is a barrier in front of you, you can't move forward."
    )


def test_locked_doors_need_the_key_of_their_color():
    for task_id in range(23, 23 + 40 * 20, 40):  # Unlock: a locked door and its key
        played = game(task_id)
        locked = [r for r in played.view.refusals if "locked door" in r]
        if locked:
            assert played.step(locked[0]).text.endswith(", as you are not carrying a key.")
            return
    raise AssertionError("no Unlock task shows its locked door at the start")


def wasted_success(compat: bool) -> tuple[BabyAIGame, object]:
    """Task 0 won slowly: 40 turns on the spot, then the one-move win (reward <= 0.5)."""
    played = game(0, compat)
    for _ in range(40):
        played.step("turn left")
    return played, played.step("go to red ball 1")


def test_a_slow_success_ends_the_episode():
    _, outcome = wasted_success(compat=False)
    assert outcome.done and 0.1 <= outcome.reward <= 0.5
    assert outcome.text.endswith(COMPLETED)


def test_agentgym_compat_keeps_a_slow_success_running_and_rescores_its_reward():
    played, outcome = wasted_success(compat=True)
    assert not outcome.done and outcome.text.endswith(COMPLETED)
    stale = played.step("fly away")
    assert stale.reward == outcome.reward and stale.score == pytest.approx(2 * outcome.reward)


def test_invalid_steps_score_nothing():
    played = game(0)
    played.step("turn left")
    invalid = played.step("fly away")
    assert (invalid.reward, invalid.score) == (0, 0)


def door_to_open(compat: bool) -> tuple[BabyAIGame, str]:
    """An Open task whose target door can be toggled and gone through from the start."""
    for task_id in range(11, 11 + 40 * 30, 40):
        played = game(task_id, compat)
        color = played.env.mission.split()[-2]  # "open the red door"
        for action in played.view.actions:
            if action.startswith(f"toggle and go through {color} closed door"):
                return played, action
    raise AssertionError("no Open task offers its target door at the start")


def test_a_high_level_action_stops_when_the_episode_is_won():
    played, action = door_to_open(compat=False)
    outcome = played.step(action)
    assert outcome.done and outcome.reward > 0


def test_agentgym_compat_walks_on_through_the_opened_door_and_loses_the_win():
    played, action = door_to_open(compat=True)
    outcome = played.step(action)
    assert not outcome.done and outcome.reward == 0 and outcome.score == 0


def test_the_step_limit_ends_the_episode_unless_compat():
    for compat in (False, True):
        played = game(0, compat)
        outcomes = [played.step("turn left") for _ in range(played.env.max_steps)]
        last = outcomes[-1]
        assert last.done is not compat
        if not compat:
            assert last.reward == 0 and last.text.endswith("The step limit is reached.")
            assert not any(o.done for o in outcomes[:-1])


def test_pick_up_is_accepted_as_pickup_unless_compat():
    played, action = first_with("pickup ", range(16, 16 + 40 * 5, 40))
    spelled = action.replace("pickup ", "pick up ", 1)
    assert game(played.task.task_id).step(spelled).moved
    compat = game(played.task.task_id, compat=True)
    assert compat.step(spelled).text == "The action is not recognized. Please check valid actions."


def test_the_goal_keeps_minigrids_order_words_unless_compat():
    for task_id in range(7, 7 + 40 * 10, 40):  # GoToSeq: "... then ..." / "... after you ..."
        played = game(task_id)
        if " then " in played.goal or " after you " in played.goal:
            rewritten = game(task_id, compat=True).goal
            assert played.goal == played.env.mission
            assert " and " in rewritten and " then " not in rewritten
            assert " after you " not in rewritten
            return
    raise AssertionError("no GoToSeq mission with an order word")


def walled_in_door_view() -> tuple[np.ndarray, Pose]:
    """A 7x7 view with a closed red door walled in on every side the agent could face it from."""
    image = np.zeros((7, 7, 3), dtype=np.uint8)
    image[:, :, 0] = OBJECT_TO_IDX["empty"]
    image[3, 2] = (OBJECT_TO_IDX["door"], COLOR_TO_IDX["red"], 1)
    for col, row in ((2, 2), (4, 2), (3, 1), (3, 3)):
        image[col, row] = (OBJECT_TO_IDX["wall"], COLOR_TO_IDX["grey"], 0)
    return image, Pose((10, 10), 3)


def test_an_unreachable_door_is_refused_by_number_unless_compat():
    image, pose = walled_in_door_view()
    action = "toggle and go through red closed door 1"
    assert render(image, pose, None, 7, plain_refusals=True).refusals[action] == (
        "You cannot toggle and go through red closed door 1, as there is no path leading to it."
    )
    assert render(image, pose, None, 7).refusals[action] == (
        "You cannot toggle and go through red closed door {'red closed door': 1}, "
        "as there is no path leading to it."
    )
    assert game(0).view.refusals.keys() == game(0, compat=True).view.refusals.keys()


def test_the_env_switch_reaches_the_game():
    assert make_env("babyai", agentgym_compat=True).agentgym_compat
    assert not make_env("babyai").agentgym_compat


@pytest.mark.parametrize("compat", [False, True])
def test_summed_step_rewards_are_the_score_agentgyms_client_reports(compat):
    assert get_spec("babyai").episode_reward == "sum"
    played = game(0, compat)
    actions = ["turn left"] * 40 + ["go to red ball 1", "fly away", "turn left"]
    outcomes = [played.step(a) for a in actions[: 41 if not compat else None]]
    assert sum(o.reward for o in outcomes) == pytest.approx(outcomes[-1].score)
    assert outcomes[-1].score > 0
