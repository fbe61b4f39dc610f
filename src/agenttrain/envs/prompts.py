"""Conversation starts: AgentGym's instructions + acknowledgement for each environment.

`agentgym_prompts.json` holds AgentGym's ReAct texts byte for byte (agentenv/envs/*.py),
so published numbers can be reproduced exactly (`prompt_style: agentgym`). The default
text applies the fixes below, each a literal edit that must find its target, so a change
of the source data cannot silently drop a fix.
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources

from agenttrain.envs.base import Message

FIXES: dict[str, list[tuple[str, str]]] = {
    "textcraft": [
        ("You are given few useful", "You are given a few useful"),
        # "get" only fetches basic items from the environment; it never reads the inventory.
        (
            'you have to respond an action based on the state and instruction. You can "get" an '
            "object (ingredients) from the inventory or the environment, look-up the game "
            'inventory by "inventory"',
            'you have to respond with an action based on the state and instruction. You can "get" '
            'a basic ingredient from the environment, look up the game inventory with "inventory"',
        ),
        # The format block was wrapped in stray quotes and glued to the preceding colon.
        (
            'format:"Thought:\nyour thoughts.\n\nAction:\nyour next action"',
            "format:\nThought:\nyour thoughts.\n\nAction:\nyour next action",
        ),
        (
            " - Example of get: get 1 lapis lazuli - Example1 of craft: craft 1 blue dye using 1 "
            "lapis lazuli - Example2 of craft:",
            "\n - Example of get: get 1 lapis lazuli\n - Example 1 of craft: craft 1 blue dye "
            "using 1 lapis lazuli\n - Example 2 of craft:",
        ),
        # A generic ingredient ("planks") is a tag; the game only accepts a concrete item.
        (
            'you can use special types of the same ingredient e.g. "dark oak planks" in the '
            "command instead.",
            'you must use a specific type of that ingredient in the command instead, e.g. "dark '
            'oak planks".\n4. Use exactly the ingredient counts of the crafting command; one craft '
            "makes the output count it names.",
        ),
    ],
    # BabyAI's action is "pickup"; AgentGym's prompt taught "pick up", which is not recognised.
    "babyai": [("- pick up <obj> <id>", "- pickup <obj> <id>")],
    "alfworld": [("if the envrionment output", "if the environment output")],
    "sqlgym": [("SQlite", "SQLite")],
}


@cache
def _agentgym_texts() -> dict[str, dict[str, str]]:
    data = resources.files("agenttrain.envs").joinpath("agentgym_prompts.json").read_text()
    return json.loads(data)


def agentgym_conversation_start(env: str) -> tuple[Message, ...]:
    """AgentGym's ReAct conversation start for `env`, verbatim."""
    text = _agentgym_texts()[env]
    return (
        Message("user", text["instructions"]),
        Message("assistant", text["acknowledgement"]),
    )


def fixed_instructions(env: str) -> str:
    """AgentGym's instructions with the known bugs fixed and stray whitespace trimmed."""
    text = _agentgym_texts()[env]["instructions"]
    for old, new in FIXES.get(env, []):
        if old not in text:
            raise ValueError(f"prompt fix for {env} no longer applies; missing: {old[:60]!r}")
        text = text.replace(old, new)
    return re.sub(r"[ \t]+\n", "\n", text).strip()


def conversation_start(env: str) -> tuple[Message, ...]:
    """The default conversation start for `env`: fixed instructions + AgentGym's acknowledgement."""
    return (
        Message("user", fixed_instructions(env)),
        Message("assistant", _agentgym_texts()[env]["acknowledgement"]),
    )
