"""Strict JSON actions for any environment: a schema, a parser, and the format rule of rewards.

A reply is a valid action when, after stripping surrounding whitespace, it is exactly one JSON
object that the schema accepts. Nothing else is tolerated by default: no text before or after
the object, no Markdown fence, no second object, no NaN or Infinity (which Python's `json`
would accept but JSON does not), no duplicate field. `JsonSchema(fences=True)` additionally
accepts one ```` ```json ```` fence around the object, for models that always write one.

Any break of the rule raises `JsonFormatError` (an `InvalidAction`) whose message says why,
and `compose_reward` turns it into the format penalty (−1 unless configured): the reward rule
of decision tasks whose actions are JSON objects (`{"work": 0.83, "consumption": 0.69}`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agenttrain.envs.actions import InvalidAction

FieldKind = Literal["number", "integer", "string", "boolean"]
KIND_NAMES = {
    "number": "a number",
    "integer": "an integer",
    "string": "a string",
    "boolean": "a boolean",
}
FENCE = re.compile(r"^```(?:json)?[ \t]*\n(.*)\n```$", re.DOTALL)
FORMAT_PENALTY = -1.0


class JsonFormatError(InvalidAction):
    """A reply that is not an action of the schema; the message is the reason."""


@dataclass(frozen=True)
class JsonField:
    """One field of a JSON action: its type and, for numbers, an inclusive range."""

    name: str
    kind: FieldKind = "number"
    minimum: float | None = None
    maximum: float | None = None
    required: bool = True

    def check(self, value: Any) -> None:
        """Raise `JsonFormatError` when `value` is not of this field's type and range."""
        if not _is_kind(value, self.kind):
            raise JsonFormatError(
                f"field {self.name!r} must be {KIND_NAMES[self.kind]}, got {json.dumps(value)}"
            )
        if self.kind not in ("number", "integer"):
            return
        low = -math.inf if self.minimum is None else self.minimum
        high = math.inf if self.maximum is None else self.maximum
        if not low <= value <= high:
            raise JsonFormatError(
                f"field {self.name!r} is {value}, outside its range {self.range_text()}"
            )

    def range_text(self) -> str:
        low = "-inf" if self.minimum is None else f"{self.minimum:g}"
        high = "inf" if self.maximum is None else f"{self.maximum:g}"
        return f"[{low}, {high}]"


def _is_kind(value: Any, kind: FieldKind) -> bool:
    if isinstance(value, bool):  # JSON true/false are not numbers, though Python's bool is
        return kind == "boolean"
    if kind == "number":
        return isinstance(value, (int, float))
    if kind == "integer":
        return isinstance(value, int)
    return isinstance(value, str) if kind == "string" else False


@dataclass(frozen=True)
class JsonSchema:
    """The fields of a JSON action and how strictly a reply is read."""

    fields: tuple[JsonField, ...]
    extra_fields: Literal["forbid", "ignore"] = "forbid"
    """forbid: a field the schema does not name is an error; ignore: it is dropped."""
    fences: bool = False
    """Accept one ```json fence around the object (the default is the strict rule)."""

    def parse(self, reply: str) -> dict[str, Any]:
        """The action's fields, or `JsonFormatError` saying why the reply is not one."""
        text = reply.strip()
        fenced = FENCE.match(text) if self.fences else None
        if fenced:
            text = fenced.group(1).strip()
        value = _one_object(text)
        names = {field.name for field in self.fields}
        extra = sorted(set(value) - names)
        if extra and self.extra_fields == "forbid":
            raise JsonFormatError(f"unexpected field(s) {', '.join(map(repr, extra))}")
        missing = [f.name for f in self.fields if f.required and f.name not in value]
        if missing:
            raise JsonFormatError(f"missing field(s) {', '.join(map(repr, missing))}")
        for field in self.fields:
            if field.name in value:
                field.check(value[field.name])
        return {f.name: value[f.name] for f in self.fields if f.name in value}

    def example(self) -> str:
        """How the expected reply looks, for prompts and error feedback."""
        parts = [f'"{f.name}": <{f.kind}{_range_hint(f)}>' for f in self.fields]
        return "{" + ", ".join(parts) + "}"


def _range_hint(field: JsonField) -> str:
    if field.kind in ("number", "integer") and (field.minimum, field.maximum) != (None, None):
        return f" in {field.range_text()}"
    return ""


def _refuse_constant(name: str) -> None:
    raise JsonFormatError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonFormatError(f"{text} overflows a finite number")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise JsonFormatError(f"field {key!r} appears twice")
        seen[key] = value
    return seen


def _one_object(text: str) -> dict[str, Any]:
    """`text` as exactly one JSON object, nothing before or after it."""
    if not text:
        raise JsonFormatError("empty reply: expected one JSON object")
    start = text.find("{")
    if start < 0:
        raise JsonFormatError("no JSON object in the reply")
    if start > 0:
        raise JsonFormatError("text before the JSON object")
    decoder = json.JSONDecoder(
        parse_float=_finite_float, parse_constant=_refuse_constant, object_pairs_hook=_unique_keys
    )
    try:
        value, end = decoder.raw_decode(text)
    except json.JSONDecodeError as broken:
        raise JsonFormatError(f"malformed JSON: {broken.msg} at character {broken.pos}") from None
    if text[end:].strip():
        raise JsonFormatError("text after the JSON object")
    return value


@dataclass(frozen=True)
class ComposedReward:
    """A reply's reward under the format rule, and what it was made of."""

    reward: float
    action: dict[str, Any] | None
    """The parsed action; None when the reply broke the format rule."""
    format_error: str | None = None


def compose_reward(
    reply: str,
    schema: JsonSchema,
    reward_of: Callable[[Mapping[str, Any]], float],
    format_penalty: float = FORMAT_PENALTY,
) -> ComposedReward:
    """`format_penalty` for a reply that is not an action of `schema`, else `reward_of(action)`."""
    try:
        action = schema.parse(reply)
    except JsonFormatError as refused:
        return ComposedReward(format_penalty, None, str(refused))
    return ComposedReward(float(reward_of(action)), action)
