"""Action formats: how a model's reply becomes an environment action, and back.

- `react` (default): "Thought: ... Action: ...", the action read by the environment's own
  rule (`EnvSpec.parse_action`, as that environment's AgentGym client reads it).
- `adapt`: ADaPT-style lines: `> think: ...` (answered "OK." without touching the
  environment) and `> action`.
- `json`: `{"thought": "...", "action": "..."}`.
- `raw`: the whole reply is the action.

A reply with no usable action is a format-error turn: the environment is not called and the
model is told the expected format instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol

from agenttrain.envs import EnvSpec, get_spec
from agenttrain.envs.actions import ONE_ACTION, REACT_HELP, ActionParser, InvalidAction

__all__ = [
    "FORMAT_NAMES",
    "ONE_ACTION",
    "REACT_HELP",
    "ActionFormat",
    "Adapt",
    "Json",
    "ParsedReply",
    "Raw",
    "ReAct",
    "get_format",
]


@dataclass(frozen=True)
class ParsedReply:
    action: str | None
    """What to send to the environment; None when the turn does not step it."""
    thought: str = ""
    feedback: str | None = None
    """The observation to give back instead of stepping (format error, or a thought turn)."""
    format_error: bool = False


class ActionFormat(Protocol):
    name: str

    def parse(self, reply: str) -> ParsedReply: ...

    def render(self, thought: str, action: str) -> str:
        """An expert's step written in this format (oracle play, demonstrations)."""
        ...

    def instructions(self) -> str | None:
        """Format instructions appended to the environment's own, or None to keep them."""
        ...


@dataclass(frozen=True)
class ReAct:
    """AgentGym's "Thought: ... Action: ..." replies, the action read by the environment's rule."""

    parse_action: ActionParser
    name: str = "react"

    def parse(self, reply: str) -> ParsedReply:
        thought = _between(reply, "Thought:", "Action:")
        try:
            action = self.parse_action(reply)
        except InvalidAction as refused:
            return ParsedReply(None, thought, str(refused), format_error=True)
        if not action:
            return ParsedReply(None, thought, REACT_HELP, format_error=True)
        return ParsedReply(action, thought)

    def render(self, thought: str, action: str) -> str:
        return f"Thought:\n{thought}\n\nAction:\n{action}"

    def instructions(self) -> str | None:
        return None


ADAPT_HELP = "Invalid format: write one line, either '> think: your thought' or '> your action'."


@dataclass(frozen=True)
class Adapt:
    name: str = "adapt"

    def parse(self, reply: str) -> ParsedReply:
        thoughts, actions = [], []
        for line in reply.strip().splitlines():
            line = line.strip().removeprefix(">").strip()
            if not line:
                continue
            if line.lower().startswith("think:"):
                thoughts.append(line[len("think:") :].strip())
            else:
                actions.append(line)
        thought = " ".join(thoughts)
        if len(actions) > 1:
            return ParsedReply(None, thought, ADAPT_HELP, format_error=True)
        if actions:
            return ParsedReply(actions[0], thought)
        if thoughts:
            return ParsedReply(None, thought, "OK.")
        return ParsedReply(None, "", ADAPT_HELP, format_error=True)

    def render(self, thought: str, action: str) -> str:
        return f"> think: {thought}\n> {action}" if thought else f"> {action}"

    def instructions(self) -> str | None:
        return (
            "Response format (this replaces any Thought/Action format above): write "
            "'> think: <your thought>' to think (answered 'OK.') and '> <action>' to act; "
            "you may think on one line and act on the next."
        )


JSON_HELP = 'Invalid format: reply with one JSON object: {"thought": "...", "action": "..."}'


@dataclass(frozen=True)
class Json:
    name: str = "json"

    def parse(self, reply: str) -> ParsedReply:
        start, end = reply.find("{"), reply.rfind("}")
        if start < 0 or end < start:
            return ParsedReply(None, "", JSON_HELP, format_error=True)
        try:
            value = json.loads(reply[start : end + 1])
        except json.JSONDecodeError:
            return ParsedReply(None, "", JSON_HELP, format_error=True)
        if not isinstance(value, dict):
            return ParsedReply(None, "", JSON_HELP, format_error=True)
        action, thought = value.get("action"), value.get("thought", "")
        if not isinstance(action, str) or not action.strip():
            return ParsedReply(None, str(thought), JSON_HELP, format_error=True)
        return ParsedReply(action.strip(), str(thought))

    def render(self, thought: str, action: str) -> str:
        return json.dumps({"thought": thought, "action": action})

    def instructions(self) -> str | None:
        return (
            "Response format (this replaces any Thought/Action format above): reply with one "
            'JSON object and nothing else: {"thought": "<your reasoning>", "action": "<one '
            'action>"}'
        )


@dataclass(frozen=True)
class Raw:
    name: str = "raw"

    def parse(self, reply: str) -> ParsedReply:
        action = reply.strip()
        if not action:
            return ParsedReply(None, "", "Invalid format: reply with an action.", format_error=True)
        return ParsedReply(action)

    def render(self, thought: str, action: str) -> str:
        return action

    def instructions(self) -> str | None:
        return (
            "Response format (this replaces any Thought/Action format above): reply with the "
            "action only, nothing else."
        )


FORMAT_NAMES = ("react", "adapt", "json", "raw")


def get_format(name: str, env: EnvSpec | str) -> ActionFormat:
    """The action format `name` for environment `env` (its spec, or its registered name)."""
    if name == "react":
        spec = get_spec(env) if isinstance(env, str) else env
        return ReAct(spec.parse_action)
    if name == "adapt":
        return Adapt()
    if name == "json":
        return Json()
    if name == "raw":
        return Raw()
    raise ValueError(f"unknown action format {name!r}; choose one of: {', '.join(FORMAT_NAMES)}")


def _between(text: str, start: str, end: str) -> str:
    if start not in text:
        return ""
    after = text.split(start, 1)[1]
    return after.split(end, 1)[0].strip()
