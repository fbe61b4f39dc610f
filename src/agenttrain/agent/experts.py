"""Expert policies: an environment's oracle solver played as a text policy.

The oracle reads the task from the conversation (so it needs no side channel and plays
through the same engine, in-process or over HTTP) and answers each turn with the next step
of its plan, written in the episode's action format.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache

from agenttrain.agent.formats import ActionFormat
from agenttrain.envs.textcraft.oracle import PlannedAction, plan_for_observation
from agenttrain.policy.base import ChatMessage, PolicyError, SamplingParams, TextGeneration

Planner = Callable[[str], list[PlannedAction]]
"""First observation -> the expert's whole plan."""

PLANNERS: dict[str, tuple[str, Planner]] = {
    "textcraft": ("Goal: craft", plan_for_observation),
}


def has_expert(env: str) -> bool:
    return env in PLANNERS


class OracleExpert:
    """The oracle of `env` as a `TextPolicy`."""

    def __init__(self, env: str, action_format: ActionFormat) -> None:
        if env not in PLANNERS:
            known = ", ".join(PLANNERS)
            raise PolicyError(f"no oracle for {env!r}; environments with one: {known}")
        self.name = "oracle"
        self.marker, planner = PLANNERS[env]
        self._plan = lru_cache(maxsize=4096)(planner)
        self.format = action_format

    def next_step(self, conversation: Sequence[ChatMessage]) -> PlannedAction:
        for index, message in enumerate(conversation):
            if message.role == "user" and self.marker in message.content:
                steps = self._plan(message.content)
                done = sum(1 for m in conversation[index + 1 :] if m.role == "assistant")
                return steps[min(done, len(steps) - 1)]
        raise PolicyError(f"the oracle found no task ({self.marker!r}) in the conversation")

    async def chat(
        self, conversations: Sequence[Sequence[ChatMessage]], sampling: SamplingParams
    ) -> list[TextGeneration]:
        replies = []
        for conversation in conversations:
            step = self.next_step(conversation)
            replies.append(TextGeneration(self.format.render(step.thought, step.action)))
        return replies
