"""What an environment bundles besides its game: how a ReAct reply becomes its action, and
(optionally) an oracle that plans the actions solving a task.

Each environment's spec carries its own `parse_action` and `oracle`, so the generic action
formats (`agenttrain.agent`) and the expert policy never name an environment.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

REACT_HELP = (
    "Invalid format: no action found. Reply exactly in this format:\n"
    "Thought:\nyour thoughts.\n\nAction:\nyour next action"
)
ONE_ACTION = "Error: Only one 'Action' is allowed per response. Please adjust your response."
"""AgentGym's TextCraft/BabyAI client answer to a reply with several `Action:` lines."""

ActionParser = Callable[[str], str]
"""A ReAct reply -> the action to send ('' when there is none); raises `InvalidAction` when
the reply breaks a rule of the environment that deserves its own feedback."""


class InvalidAction(ValueError):
    """The reply breaks the environment's action rule; the message is the model's feedback."""


def after_last_action(reply: str) -> str:
    """Everything after the last `Action:` (AgentGym's WebShop, ALFWorld, SciWorld clients)."""
    return reply.rsplit("Action:", 1)[1].strip() if "Action:" in reply else ""


def single_action_line(reply: str) -> str:
    """The rest of the one `Action:` line; several are refused (AgentGym's TextCraft/BabyAI)."""
    found = re.findall(r"Action:\s*(.*?)(?=\n|$)", reply, re.DOTALL)
    if len(found) > 1:
        raise InvalidAction(ONE_ACTION)
    return found[0].strip() if found else ""


def whole_reply(reply: str) -> str:
    """The whole reply is the action (SearchQA's tags are read by its server)."""
    return reply.strip()


@dataclass(frozen=True)
class PlannedAction:
    """One step of an oracle's plan: the action and a short thought to show with it."""

    thought: str
    action: str


@dataclass(frozen=True)
class Oracle:
    """An environment's expert: it reads the task from the first observation and plans.

    Reading the task from the conversation means it needs no side channel and plays through
    a remote server as well as in-process.
    """

    task_marker: str
    """Text that only the task's first observation contains (TextCraft: "Goal: craft")."""
    plan: Callable[[str], Sequence[PlannedAction]]
    """First observation -> the whole plan."""
    follow: Callable[[Sequence[str]], PlannedAction] | None = None
    """Closed-loop form, for environments whose first observation does not settle the task
    (BabyAI): the episode's observations so far, the first one first -> the next step.
    When set, the expert plays by it instead of `plan`."""
