"""The messages that open an episode: the environment's instructions in the chosen format."""

from __future__ import annotations

from typing import Literal

from agenttrain.agent.formats import ActionFormat
from agenttrain.envs.base import EnvSpec

PromptStyle = Literal["agenttrain", "agentgym"]


def conversation_start(
    spec: EnvSpec, action_format: ActionFormat, style: PromptStyle = "agenttrain"
) -> list[dict[str, str]]:
    """Instructions + acknowledgement; `agentgym` keeps AgentGym's text verbatim."""
    start = spec.conversation_start if style == "agenttrain" else spec.agentgym_conversation_start
    messages = [message.to_dict() for message in start]
    extra = action_format.instructions()
    if extra and messages:
        messages[0]["content"] = messages[0]["content"].rstrip() + "\n\n" + extra
    return messages
