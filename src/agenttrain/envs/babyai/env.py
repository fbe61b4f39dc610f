"""BabyAI as an in-process `Environment`, served with AgentGym's BabyAI wire protocol."""

from __future__ import annotations

from agenttrain.envs.babyai.actions import parse_action
from agenttrain.envs.babyai.game import BabyAIGame
from agenttrain.envs.babyai.levels import splits, task
from agenttrain.envs.babyai.oracle import ORACLE
from agenttrain.envs.base import (
    EnvironmentNotReset,
    EnvSpec,
    LocalEnvironment,
    Observation,
    StepResult,
    WireProtocol,
)
from agenttrain.envs.prompts import agentgym_conversation_start, conversation_start

SPEC = EnvSpec(
    name="babyai",
    display_name="BabyAI",
    description="Grid-world navigation and object manipulation from text (40 minigrid levels).",
    conversation_start=conversation_start("babyai"),
    agentgym_conversation_start=agentgym_conversation_start("babyai"),
    default_max_turns=20,
    action_format="react",
    protocol=WireProtocol(
        task_required=True,  # AgentGym answers 422 to a /reset without data_idx
        root_text="This is environment BabyAI.",
        reset_fields=("observation", "reward", "score", "deleted", "done"),
        step_info_fields=("score",),
        observation_fields=("observation", "reward", "score", "done", "deleted"),
        finished_error="The task with environment {id} has finished.",
    ),
    split_loader=splits,
    requirements="minigrid (PyPI)",
    success_reward=0.1,  # minigrid pays 1 - 0.9 * steps / max_steps >= 0.1 for a success
    # AgentGym's client reports `score`, the running sum of the step rewards; with the defects
    # fixed only the last step pays, so the sum is also the last reward.
    episode_reward="sum",
    breakdown_key="category",
    parse_action=parse_action,
    oracle=ORACLE,
)


def _as_sent(value: float) -> float | int:
    """AgentGym sends integral rewards and scores as ints (minigrid's 0)."""
    return int(value) if float(value).is_integer() else value


class BabyAIEnv(LocalEnvironment):
    """One BabyAI episode; `agentgym_compat=True` keeps AgentGym's defects (see `game`)."""

    spec = SPEC

    def __init__(self, agentgym_compat: bool = False) -> None:
        super().__init__()
        self.agentgym_compat = agentgym_compat
        self._game: BabyAIGame | None = None

    def reset_sync(self, task_id: int) -> Observation:
        chosen = task(task_id)
        self._game = BabyAIGame(chosen, self.agentgym_compat)
        level = chosen.level
        return Observation(
            self._game.first_observation(),
            {
                "task_id": task_id,
                "level": level.number,
                "level_name": level.gym_id,
                "seed": chosen.seed,
                "category": level.category,
                "goal": self._game.goal,
                "score": 0,
            },
        )

    def step_sync(self, action: str) -> StepResult:
        if self._game is None:
            raise EnvironmentNotReset("BabyAI: call reset(task_id) before step()")
        outcome = self._game.step(action)
        return StepResult(
            self._game.observation(outcome.text),
            outcome.reward,
            outcome.done,
            {"score": _as_sent(outcome.score), "moved": outcome.moved},
        )
