"""Supervised data: conversations with a per-message "train on this" flag, from three formats.

- agenttrain trajectories (`agenttrain eval`/`demos` JSONL): the episode's turns are trained
  on, the conversation start (instructions, acknowledgement) is not; unsuccessful episodes
  are skipped unless asked for (rejection sampling).
- AgentGym's AgentTraj: `{"item_id": "textcraft_12", "conversations": [{"from": "human"|"gpt",
  "loss": bool|null, "value": ...}]}`; `gpt` turns are trained on unless `loss` is false.
- plain chat: `{"messages": [{"role", "content"[, "loss"]}]}`; assistant turns trained on
  unless `loss` is false (`env` and `task_id` keys, if present, feed the test-split guard).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

DataFormat = Literal["auto", "trajectory", "agenttraj", "chat"]


class DataError(ValueError):
    """A data file or line cannot be used; the message names the file and line."""


@dataclass
class Conversation:
    messages: list[dict[str, str]]
    trainable: list[bool]
    """Per message: whether its tokens carry loss (only assistant messages may)."""
    source: str
    """file:line, for error messages."""
    env: str | None = None
    task_id: int | None = None
    """Our task id (agenttrain formats only; AgentGym's ids name other goals)."""
    cut_off: frozenset[int] = frozenset()
    """Indices of assistant messages cut off by the token limit during rollout: their
    end-of-turn token was the template's, not the model's, so it carries no loss (as in RL)."""

    @property
    def opening(self) -> list[str]:
        """The user messages before the first trained turn: the instructions (if any), the
        environment's first observation, and, in a recovery demonstration whose refused first
        action carries no loss, that refusal. Which of them is the first observation cannot be
        told from the masks alone."""
        first = next((i for i, trained in enumerate(self.trainable) if trained), 0)
        return [m["content"] for m in self.messages[:first] if m["role"] == "user"]


def detect_format(record: dict[str, Any]) -> DataFormat:
    if "conversations" in record:
        return "agenttraj"
    if "messages" in record and "turns" in record and "episode_id" in record:
        return "trajectory"
    if "messages" in record:
        return "chat"
    raise DataError("neither 'conversations' (AgentTraj) nor 'messages' (trajectory, chat)")


def _from_trajectory(record: dict[str, Any], source: str) -> Conversation:
    messages = [{"role": m["role"], "content": m["content"]} for m in record["messages"]]
    turns = record["turns"]
    replies = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    trained = replies[len(replies) - len(turns) :] if turns else []
    cut_off = frozenset(i for i, turn in zip(trained, turns, strict=False) if turn.get("cut_off"))
    return Conversation(
        messages,
        [i in set(trained) for i in range(len(messages))],
        source,
        record.get("env"),
        record.get("task_id"),
        cut_off,
    )


def _from_agenttraj(record: dict[str, Any], source: str) -> Conversation:
    roles = {"human": "user", "gpt": "assistant", "system": "system"}
    messages, trainable = [], []
    for turn in record["conversations"]:
        if turn.get("from") not in roles:
            raise DataError(f"unknown speaker {turn.get('from')!r} (expected human, gpt or system)")
        role = roles[turn["from"]]
        messages.append({"role": role, "content": str(turn.get("value", ""))})
        trainable.append(role == "assistant" and turn.get("loss") is not False)
    env = str(record.get("item_id", "")).rsplit("_", 1)[0] or None
    return Conversation(messages, trainable, source, env, None)


def _from_chat(record: dict[str, Any], source: str) -> Conversation:
    messages, trainable = [], []
    for message in record["messages"]:
        if message.get("role") not in ("system", "user", "assistant"):
            raise DataError(f"unknown role {message.get('role')!r}")
        messages.append({"role": message["role"], "content": str(message.get("content", ""))})
        trainable.append(message["role"] == "assistant" and message.get("loss") is not False)
    task = record.get("task_id")
    return Conversation(
        messages, trainable, source, record.get("env"), int(task) if task is not None else None
    )


READERS = {"trajectory": _from_trajectory, "agenttraj": _from_agenttraj, "chat": _from_chat}


def read_conversations(
    path: Path, data_format: DataFormat = "auto", successful_only: bool = True
) -> Iterator[Conversation]:
    """Conversations of a JSONL file; unsuccessful trajectories skipped if `successful_only`."""
    if not path.exists():
        raise DataError(f"no such data file: {path}")
    with path.open() as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            source = f"{path}:{number}"
            try:
                record = json.loads(line)
                kind = detect_format(record) if data_format == "auto" else data_format
                if kind == "trajectory" and successful_only and not record.get("success"):
                    continue
                conversation = READERS[kind](record, source)
            except (json.JSONDecodeError, KeyError, TypeError, DataError) as problem:
                raise DataError(f"{source}: {problem}") from None
            if any(conversation.trainable):
                yield conversation


Item = TypeVar("Item")


def sample_limit(items: list[Item], limit: int | None, seed: str) -> list[Item]:
    """At most `limit` of `items`: a seeded random sample kept in their order, not the first
    `limit`, because files are written in task order and TextCraft's tasks run easiest first."""
    if limit is None or limit >= len(items):
        return items
    chosen = sorted(random.Random(seed).sample(range(len(items)), limit))
    return [items[i] for i in chosen]


def limit_seed(run_seed: int) -> str:
    """The seed of `agenttrain sft`'s `data.limit` sample; GRPO's demonstration loss uses it
    to train on the same conversations as the SFT run of the same `run.seed`."""
    return f"{run_seed}/sft/limit"


def hold_out(items: list[Item], fraction: float, seed: str) -> tuple[list[Item], list[Item]]:
    """(held out, kept): a seeded `fraction` of the distinct items, at least one; every copy
    of a held-out item leaves training (`data.repeat` trains some items several times)."""
    distinct = list({id(item): item for item in items}.values())
    random.Random(seed).shuffle(distinct)
    count = max(1, round(len(distinct) * fraction))
    chosen = {id(item) for item in distinct[:count]}
    held = [item for item in items if id(item) in chosen]
    return list({id(item): item for item in held}.values()), [
        item for item in items if id(item) not in chosen
    ]
