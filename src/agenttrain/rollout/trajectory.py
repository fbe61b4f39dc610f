"""An episode as training, SFT, evaluation and the experience pool all read it, and its JSONL.

Token fields (`prompt_ids`, `response_ids`, `response_mask`, `logprobs`) are filled by
token policies: `response_mask` is 1 on tokens the model sampled and 0 on template and
environment tokens, and `logprobs` holds each sampled token's log-probability (0 under mask
0). Text policies (APIs, oracles) leave them empty; `messages` is always the transcript.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

FinishReason = Literal[
    "done", "max_turns", "context_limit", "env_error", "agent_error", "format_error"
]
FINISH_REASONS: tuple[FinishReason, ...] = (
    "done",
    "max_turns",
    "context_limit",
    "env_error",
    "agent_error",
    "format_error",
)
ERROR_REASONS: frozenset[str] = frozenset({"env_error", "agent_error"})
"""Episodes that ended in a failure, not in play: no reward, never scored, always counted.
env_error: the environment (or its server) failed; agent_error: the agent's side raised (a
solver, an action parser, a chat backend, the policy)."""


@dataclass
class Turn:
    """One model turn and what came back."""

    reply: str
    action: str | None
    """What was sent to the environment; None when the turn did not step it."""
    observation: str
    reward: float
    done: bool
    format_error: bool = False
    new_tokens: int = 0
    cut_off: bool = False
    """The reply hit the token limit: its end-of-turn token was written by the template, not
    sampled (mask 0), so SFT does not train the model to end such a reply either."""
    token_span: tuple[int, int] | None = None
    """[start, end) of this reply's sampled tokens in `response_ids` (empty for an empty
    reply); None for text policies and records written before spans were kept."""


@dataclass
class Trajectory:
    episode_id: str
    env: str
    task_id: int
    group_id: str
    sample: int
    """Index within the group (the n samples of one task)."""
    seed: int
    model: str
    messages: list[dict[str, str]] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    prompt_ids: list[int] = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    reward: float | None = 0.0
    """The episode's reward (the last step's, as AgentGym reports it); None on an error."""
    success: bool = False
    finish_reason: FinishReason | None = None
    error: str | None = None
    """What went wrong, for env_error and agent_error episodes."""
    task_info: dict[str, Any] = field(default_factory=dict)
    """What the environment said about the task at reset (e.g. TextCraft's goal and depth)."""
    timing: dict[str, float] = field(default_factory=dict)
    oracle_turns: int = 0
    """The first turns the oracle played (an oracle start, `EpisodeRequest.oracle_share`):
    part of the prompt, not trained on, and the task counts as easier than it is."""
    experience: str | None = None
    """Experience shown in the first user turn while playing (None: played without). It is
    not in `messages` or `prompt_ids`: training sees the prompt without it."""

    @property
    def errored(self) -> bool:
        """Ended in an environment or agent failure (see ERROR_REASONS): not scored."""
        return self.finish_reason in ERROR_REASONS

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    @property
    def turn_rewards(self) -> list[float]:
        return [turn.reward for turn in self.turns]

    @property
    def format_errors(self) -> int:
        return sum(turn.format_error for turn in self.turns)

    @property
    def generated_tokens(self) -> int:
        return sum(turn.new_tokens for turn in self.turns)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["num_turns"] = self.num_turns
        data["turn_rewards"] = self.turn_rewards
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        data = {k: v for k, v in data.items() if k not in ("num_turns", "turn_rewards")}
        turns = [_turn_from_dict(turn) for turn in data.pop("turns", [])]
        return cls(**data, turns=turns)


def _turn_from_dict(data: dict[str, Any]) -> Turn:
    span = data.get("token_span")
    return Turn(**{**data, "token_span": tuple(span) if span is not None else None})


def write_jsonl(path: Path, trajectories: Iterable[Trajectory], append: bool = False) -> int:
    """Write trajectories one JSON object per line; returns how many were written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("a" if append else "w") as handle:
        for trajectory in trajectories:
            handle.write(json.dumps(trajectory.to_dict()) + "\n")
            count += 1
    return count


def read_jsonl(path: Path) -> Iterator[Trajectory]:
    with path.open() as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                try:
                    yield Trajectory.from_dict(json.loads(line))
                except (json.JSONDecodeError, TypeError) as problem:
                    raise ValueError(f"{path}:{number}: not a trajectory: {problem}") from None
