"""SciWorld (ScienceWorld) as an environment: AgentGym's games, rewards and wire format.

Reference: agentgym.md section 1.3. A reset loads (task, variation) and takes the first
"look around" step, as AgentGym's server does; the agent sees the task description, a
newline and that observation (AgentGym's client). `score` is ScienceWorld's 0-100 score,
each step's reward is the change of score (so an episode's rewards sum to its score), a
score below zero (a failed task, -100) ends the episode, and so do completion and more than
`step_limit` moves (ScienceWorld's envStepLimit, 100).
"""

from __future__ import annotations

from typing import Any

from agenttrain.envs.actions import after_last_action
from agenttrain.envs.base import (
    EnvError,
    EnvironmentNotReset,
    EnvSpec,
    LocalEnvironment,
    Observation,
    StepResult,
    WireProtocol,
)
from agenttrain.envs.prompts import agentgym_conversation_start, conversation_start
from agenttrain.envs.sciworld.games import Game, game, splits
from agenttrain.envs.sciworld.jvm import (
    Simulators,
    require_java,
    require_scienceworld,
    simulators,
)
from agenttrain.envs.sciworld.oracle import ORACLE, describe

INVALID_ACTION = "No known action matches that input."
"""ScienceWorld's observation for an action it cannot parse (verified)."""


class EpisodeFinished(EnvError):
    """A step after the episode ended (AgentGym's server refuses it too)."""


def parse_action(reply: str) -> str:
    """After the last `Action:`, without the `</s>` AgentGym's SciWorld client strips."""
    return after_last_action(reply.removesuffix("</s>"))


SPEC = EnvSpec(
    name="sciworld",
    display_name="SciWorld",
    description="ScienceWorld: elementary-school science experiments in a text simulator "
    "(4,639 games).",
    conversation_start=conversation_start("sciworld"),
    agentgym_conversation_start=agentgym_conversation_start("sciworld"),
    default_max_turns=30,
    action_format="react",
    protocol=WireProtocol(
        task_required=True,  # AgentGym answers 422 to a /reset without data_idx
        root_text="This is environment ScienceWorld.",
        first_observation="task_and_observation",
        reset_fields=(
            "task_name",
            "var_num",
            "task_description",
            "observation",
            "reward",
            "score",
            "deleted",
            "done",
        ),
        step_info_fields=("score",),
        finished_error="The task with environment {id} has finished.",
        queries=("action_hint", "goals", "task_description"),
    ),
    split_loader=splits,
    num_tasks=4639,
    requirements="scienceworld 1.2.3 and Java 8+; runs in worker processes (one JVM each)",
    success_reward=100.0,
    episode_reward="sum",
    breakdown_key="category",
    describe=describe,
    parse_action=parse_action,
    oracle=ORACLE,
)


class SciWorldEnv(LocalEnvironment):
    """One SciWorld game at a time, on a simulator in this process's JVM."""

    spec = SPEC
    blocking = True

    def __init__(self, step_limit: int = 100, jvm_heap: str = "2g") -> None:
        super().__init__()
        self.step_limit = step_limit
        self.jvm_heap = jvm_heap
        self._simulators: Simulators | None = None
        self._simulator: Any = None
        self._game: Game | None = None
        self._score = 0
        self._done = False

    @staticmethod
    def preflight() -> None:
        """Fail at once, in one line, when Java or scienceworld is missing."""
        require_java()
        require_scienceworld()

    def reset_sync(self, task_id: int) -> Observation:
        chosen = game(task_id)
        if self._simulators is None or not self._simulators.alive():
            self._simulators = simulators(self.jvm_heap)  # again if the JVM died
            self._simulator = self._simulators.new()
        self._simulator.load(chosen.task.name, chosen.variation, "", False)
        self._game, self._score, self._done = chosen, 0, False
        description = self._simulator.getTaskDescription()
        observation, reward, score = self._advance("look around")
        return Observation(
            f"{description}\n{observation}",
            {
                "task_name": chosen.task.name,
                "var_num": chosen.variation,
                "task_description": description,
                "observation": observation,
                "reward": reward,
                "score": score,
                "category": chosen.task.category,
            },
        )

    def step_sync(self, action: str) -> StepResult:
        if self._game is None:
            raise EnvironmentNotReset("SciWorld: call reset(task_id) before step()")
        if self._done:
            raise EpisodeFinished("SciWorld: the episode has ended; reset to play again")
        observation, reward, score = self._advance(action)
        return StepResult(observation, float(reward), self._done, {"score": score})

    def query_sync(self, name: str) -> dict[str, Any]:
        """AgentGym's read-only routes: the action templates and objects of the current
        state (`action_hint`), goal progress (`goals`), the task description."""
        if self._game is None:
            raise EnvironmentNotReset(f"SciWorld: call reset(task_id) before {name}")
        simulator = self._simulator
        if name == "action_hint":
            return {
                "possible_actions": list(simulator.getPossibleActions()),
                "possible_objects": list(simulator.getPossibleObjects()),
            }
        if name == "goals":
            return {"goals": simulator.getGoalProgressStr()}
        if name == "task_description":
            return {"task_description": simulator.getTaskDescription()}
        known = ", ".join(SPEC.protocol.queries)
        raise KeyError(f"SciWorld has no query {name!r}; queries: {known}")

    async def query(self, name: str) -> dict[str, Any]:
        return await self._call(self.query_sync, name)

    def close_sync(self) -> None:
        if self._simulators is not None:
            self._simulators.release(self._simulator)
            self._simulators = self._simulator = None

    def _advance(self, action: str) -> tuple[str, int, int]:
        """One simulator step: (observation, reward = score change, score); sets done."""
        observation = self._simulator.step(action)
        score = round(100 * self._simulator.getScore())
        completed = bool(self._simulator.getCompleted())
        over_limit = self._simulator.getNumMoves() > self.step_limit
        reward, self._score = score - self._score, score
        self._done = completed or over_limit or score < 0
        return observation, reward, score
