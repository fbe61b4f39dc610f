"""Expert policies: an environment's oracle played as a text policy.

The oracle comes with the environment (`EnvSpec.oracle`); it reads the task from the
conversation (so it needs no side channel and plays through the same engine, in-process or
over HTTP) and answers each turn with the next step of its plan, written in the episode's
action format.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from agenttrain.agent.budget import time_budget
from agenttrain.agent.formats import ActionFormat
from agenttrain.envs import EnvSpec, get_spec, registrations
from agenttrain.envs.actions import PlannedAction
from agenttrain.policy.base import ChatMessage, PolicyError, SamplingParams, TextGeneration

SOLVER_BUDGET_S = 20.0
"""CPU seconds an oracle may think about one turn (`agent/budget.py`). Most plans take well
under a second; a few grid-world plans take seconds (one test task: ~11 s of CPU on
a slow 2-core machine, where a 10 s budget failed the oracle on a task it solves). Past the
budget the episode ends as an `agent_error`."""


class OracleExpert:
    """The oracle of `env` (its spec, or its registered name) as a chat backend (`ChatBackend`)."""

    def __init__(
        self, env: EnvSpec | str, action_format: ActionFormat, budget_s: float = SOLVER_BUDGET_S
    ) -> None:
        spec = get_spec(env) if isinstance(env, str) else env
        if spec.oracle is None:
            known = ", ".join(r.spec.name for r in registrations() if r.spec.oracle) or "none"
            raise PolicyError(f"no oracle for {spec.name!r}; environments with one: {known}")
        self.name = "oracle"
        self.marker = spec.oracle.task_marker
        self._plan = lru_cache(maxsize=4096)(spec.oracle.plan)
        self._follow = spec.oracle.follow
        self.format = action_format
        self.budget_s = budget_s
        self._what = f"the {spec.display_name} oracle"

    def next_step(self, conversation: Sequence[ChatMessage]) -> PlannedAction:
        """The next step of the oracle's plan, within `budget_s` (else `BudgetExceeded`)."""
        with time_budget(self.budget_s, self._what):
            return self._next_step(conversation)

    def plan_length(self, conversation: Sequence[ChatMessage]) -> int:
        """Steps in the oracle's plan for the task (a closed-loop oracle's open-loop estimate)."""
        with time_budget(self.budget_s, self._what):
            return len(self._plan(conversation[self._task_index(conversation)].content))

    def _next_step(self, conversation: Sequence[ChatMessage]) -> PlannedAction:
        index = self._task_index(conversation)
        if self._follow is not None:
            seen = [m.content for m in conversation[index:] if m.role == "user"]
            return self._follow(seen)
        steps = self._plan(conversation[index].content)
        done = sum(1 for m in conversation[index + 1 :] if m.role == "assistant")
        return steps[min(done, len(steps) - 1)]

    def _task_index(self, conversation: Sequence[ChatMessage]) -> int:
        """Where the task's first observation is in the conversation."""
        for index, message in enumerate(conversation):
            if message.role == "user" and self.marker in message.content:
                return index
        raise PolicyError(f"the oracle found no task ({self.marker!r}) in the conversation")

    async def chat(
        self, conversations: Sequence[Sequence[ChatMessage]], sampling: SamplingParams
    ) -> list[TextGeneration]:
        replies = []
        for conversation in conversations:
            step = self.next_step(conversation)
            replies.append(TextGeneration(self.format.render(step.thought, step.action)))
        return replies
