"""Experiences (ReMe's task-memory schema), the episodes they are drawn from, and the texts
a policy sees: the retrieval answer and the marked block injected into the first user turn."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

BLOCK_START = "<experience>"
BLOCK_END = "</experience>"
TRAIN_SPLIT = "train"


class SplitLeak(ValueError):
    """A trajectory from outside the training split was about to enter the pool."""


@dataclass
class Experience:
    """One memory: `when_to_use` is the text retrieval matches (ReMe embeds it too);
    `content` is what the policy is told."""

    when_to_use: str
    content: str
    score: float
    task_id: str
    split: str
    run_step: int = 0
    workspace_id: str = "default"
    author: str = "rules"
    metadata: dict[str, Any] = field(default_factory=dict)
    memory_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    time_created: str = field(default_factory=lambda: time.strftime("%Y-%m-%d %H:%M:%S"))

    def to_reme(self) -> dict[str, Any]:
        """ReMe's `TaskMemory` dict (the fields its clients read)."""
        return {
            "workspace_id": self.workspace_id,
            "memory_id": self.memory_id,
            "memory_type": "task",
            "when_to_use": self.when_to_use,
            "content": self.content,
            "score": self.score,
            "time_created": self.time_created,
            "time_modified": self.time_created,
            "author": self.author,
            "metadata": {
                **self.metadata,
                "task_id": self.task_id,
                "split": self.split,
                "run_step": self.run_step,
            },
        }


@dataclass(frozen=True)
class Step:
    action: str
    observation: str
    invalid: bool = False
    """The environment refused the action or the reply had no action."""


@dataclass(frozen=True)
class EpisodeRecord:
    """What a summarizer needs of a finished episode, whoever played it."""

    task_id: str
    split: str
    goal: str
    steps: tuple[Step, ...]
    score: float
    success: bool


def require_train_split(task_id: str, split: str, train_tasks: Sequence[str] | None = None) -> None:
    """Refuse any episode not from the training split: experiences from val/test tasks would
    leak the held-out answers into every later rollout (AgentEvolver's ALFWorld port built its
    pool from test trajectories)."""
    if split != TRAIN_SPLIT:
        raise SplitLeak(
            f"task {task_id} is from split {split!r}: only {TRAIN_SPLIT!r} "
            "trajectories may enter the experience pool"
        )
    if train_tasks is not None and task_id not in train_tasks:
        raise SplitLeak(
            f"task {task_id} is labelled {TRAIN_SPLIT!r} but is not in the "
            "environment's training split; it may not enter the experience pool"
        )


def retrieval_answer(experiences: Sequence[Experience]) -> str:
    """ReMe's `retrieve_task_memory` answer with LLM rewriting off."""
    return "\n".join(
        f"Memory {number} :\n When to use: {item.when_to_use}\n Content: {item.content}\n"
        for number, item in enumerate(experiences, start=1)
    ).strip()


def simple_answer(experiences: Sequence[Experience]) -> str:
    """ReMe's `retrieve_task_memory_simple` answer."""
    if not experiences:
        return ""
    lines = [f"- {item.when_to_use} {item.content}" for item in experiences]
    return (
        "Previous Memory\n"
        + "\n".join(lines)
        + "\nPlease consider the helpful parts from these in answering the question, "
        "to make the answer more complete and effective."
    )


def with_experience(observation: str, answer: str) -> str:
    """The first user turn with the retrieved experience in a marked block before it."""
    return (
        f"{BLOCK_START}\nSome related experience to help you complete the task:\n"
        f"{answer}\n{BLOCK_END}\n\n{observation}"
    )


def observation_after_block(text: str) -> str:
    """The exact observation of a turn written by `with_experience`."""
    return text.split(f"{BLOCK_END}\n\n", 1)[1]


def without_experience(text: str) -> str:
    """Remove a marked experience block (for texts that arrive from outside, e.g. over HTTP)."""
    start = text.find(BLOCK_START)
    end = text.find(BLOCK_END, start)
    if start < 0 or end < 0:
        return text
    return (text[:start] + text[end + len(BLOCK_END) :]).lstrip("\n")
