"""How a ReAct reply becomes an Echo action."""

from __future__ import annotations

from agenttrain.envs.actions import after_last_action


def parse_action(reply: str) -> str:
    """After the last `Action:`, without surrounding quotes or a closing full stop."""
    return after_last_action(reply).strip("\"'").removesuffix(".")
