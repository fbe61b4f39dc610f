"""TextCraft as an in-process `Environment`."""

from __future__ import annotations

from agenttrain.envs.base import (
    EnvironmentNotReset,
    EnvSpec,
    LocalEnvironment,
    Observation,
    StepResult,
    WireProtocol,
)
from agenttrain.envs.prompts import agentgym_conversation_start, conversation_start
from agenttrain.envs.textcraft.actions import parse_action
from agenttrain.envs.textcraft.game import TextCraftGame, refusal_kind, refused
from agenttrain.envs.textcraft.oracle import ORACLE, goal_from_observation
from agenttrain.envs.textcraft.progress import progress
from agenttrain.envs.textcraft.recipes import default_book, display_name
from agenttrain.envs.textcraft.recoveries import inventory_states, recoveries
from agenttrain.envs.textcraft.tasks import splits, task


def describe(observation: str) -> dict[str, object]:
    """Goal, crafting depth and ingredient kinds of the task whose first observation this is
    (`agenttrain compare --by depth,ingredients`: a small model that copies one-ingredient
    recipes may still fail every goal whose recipe lists two)."""
    try:
        goal = goal_from_observation(observation)
    except ValueError:
        return {}
    book = default_book()
    kinds = min((len(recipe.inputs) for recipe in book.recipes_for(goal)), default=0)
    return {"goal": display_name(goal), "depth": book.depth(goal), "ingredients": kinds}


def depth_of(task_id: int) -> str:
    """A task's crafting depth (its difficulty class for frontier sampling)."""
    return f"depth {task(task_id).depth}"


SPEC = EnvSpec(
    name="textcraft",
    display_name="TextCraft",
    description="Craft a Minecraft item from basic ingredients with the recipes shown (544 goals).",
    conversation_start=conversation_start("textcraft"),
    agentgym_conversation_start=agentgym_conversation_start("textcraft"),
    default_max_turns=20,
    action_format="react",
    protocol=WireProtocol(
        root_text="This is environment TextCraft.",
        create_body={"commands": None, "goal": None},
        create_returns_observation=True,
    ),
    split_loader=splits,
    num_tasks=544,
    requirements="pure Python; recipe data from the `textcraft` package",
    breakdown_key="depth",
    task_stratum=depth_of,
    describe=describe,
    task_key="goal",
    parse_action=parse_action,
    oracle=ORACLE,
    progress=progress,
    refused=refused,
    refusal_kind=refusal_kind,
    recoveries=recoveries,
    states=inventory_states,
    action_verbs=("get", "craft", "inventory"),
)


class TextCraftEnv(LocalEnvironment):
    """One TextCraft episode. Reward 1 and done when the goal item is crafted, else 0."""

    spec = SPEC

    def __init__(self) -> None:
        super().__init__()
        self._game: TextCraftGame | None = None

    def reset_sync(self, task_id: int) -> Observation:
        chosen = task(task_id)
        self._game = TextCraftGame(default_book(), chosen.goal)
        return Observation(
            chosen.observation,
            {"task_id": chosen.task_id, "goal": chosen.goal_name, "depth": chosen.depth},
        )

    def step_sync(self, action: str) -> StepResult:
        if self._game is None:
            raise EnvironmentNotReset("TextCraft: call reset(task_id) before step()")
        outcome = self._game.step(action)
        inventory = {display_name(item): n for item, n in self._game.inventory.items()}
        return StepResult(
            outcome.observation, float(outcome.reward), outcome.done, {"inventory": inventory}
        )
