"""How a ReAct reply becomes a BabyAI action, as AgentGym's BabyAI client reads it."""

from __future__ import annotations

import re

from agenttrain.envs.actions import single_action_line


def parse_action(reply: str) -> str:
    """The one `Action:` line with everything but letters, digits, commas and spaces removed."""
    return " ".join(re.sub(r"[^A-Za-z0-9, ]+", "", single_action_line(reply)).split())
