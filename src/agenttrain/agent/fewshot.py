"""Few-shot retrieval: good past decisions from training episodes, shown in the prompt.

A pool is built from episode files (the JSONL that `agenttrain eval` and training write): every
decision that stepped the environment, with the state it was taken in and its turn reward,
kept when the reward reaches a quantile of all decisions' rewards. A state is read from the
observation before the decision: its lines `- name: number` (a trailing `%` is allowed), so
any environment that lists its state that way works. Retrieval returns the k entries whose
states are nearest to the current one (Euclidean on features standardised over the pool).

The split guard: only train tasks may enter a pool, and a pool is checked again whenever it is
loaded; an entry from any other task is a hard error naming the tasks, because showing a
val/test task's good decision would leak the answer into evaluation.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

STATE_LINE = re.compile(r"^- (?P<name>[^:\n]+): (?P<value>-?\d+(?:\.\d+)?)%?[ \t]*$", re.M)
HEADER = "Good decisions taken in similar situations (from training episodes):"


class FewshotError(ValueError):
    """A pool that cannot be built, read or used."""


class FewshotSplitError(FewshotError):
    """Entries from tasks outside the train split: refused, never filtered silently."""


@dataclass(frozen=True)
class Example:
    """One good decision: where it was taken, the state, what was done and what it earned."""

    env: str
    task_id: int
    turn: int
    state: dict[str, float]
    action: str
    reward: float


def state_features(observation: str) -> dict[str, float]:
    """The `- name: number` lines of an observation, as numbers."""
    return {m["name"].strip(): float(m["value"]) for m in STATE_LINE.finditer(observation)}


def decisions(episode: Mapping[str, Any]) -> list[tuple[str, str, float]]:
    """(observation before, action, turn reward) for each turn of an episode that stepped the
    environment. The episode's model replies are its last `num_turns` assistant messages."""
    turns = episode.get("turns", [])
    messages = episode.get("messages", [])
    replies = [i for i, m in enumerate(messages) if m["role"] == "assistant"][-len(turns) :]
    if len(turns) == 0 or len(replies) != len(turns):
        return []
    return [
        (messages[at - 1]["content"], turn["action"], float(turn["reward"]))
        for at, turn in zip(replies, turns, strict=True)
        if turn.get("action") is not None and at > 0
    ]


def check_split(examples: Iterable[Example], envs: Collection[str], train: Collection[int]) -> None:
    """Refuse entries of another environment or from tasks outside the train split."""
    examples = list(examples)
    foreign = sorted({e.env for e in examples if e.env not in envs})
    if foreign:
        raise FewshotError(
            f"few-shot pool holds episodes of {', '.join(foreign)}; expected {', '.join(envs)}"
        )
    allowed = set(train)
    outside = sorted({e.task_id for e in examples if e.task_id not in allowed})
    if outside:
        shown = ", ".join(map(str, outside[:10])) + (" ..." if len(outside) > 10 else "")
        raise FewshotSplitError(
            f"few-shot pool: {len(outside)} task(s) not in the train split ({shown}); "
            "only training tasks may be shown as examples"
        )


def build_pool(
    episodes: Iterable[Mapping[str, Any]],
    envs: Collection[str],
    train: Collection[int],
    quantile: float = 0.75,
    floor: float = -1.0,
) -> list[Example]:
    """The decisions of `episodes` whose reward reaches the `quantile` of all their rewards
    (and exceeds `floor`, the format penalty). Episodes that ended in an environment or agent
    error are skipped; an episode of a task outside `train` refuses the whole pool."""
    if not 0.0 <= quantile <= 1.0:
        raise FewshotError(f"quantile must be in [0, 1], got {quantile}")
    found = []
    for episode in episodes:
        # rollout.trajectory.ERROR_REASONS, spelled out: this layer must not import rollout
        if episode.get("finish_reason") in ("env_error", "agent_error"):
            continue
        for turn, (observation, action, reward) in enumerate(decisions(episode)):
            state = state_features(observation)
            found.append(
                Example(episode["env"], int(episode["task_id"]), turn, state, action, reward)
            )
    check_split(found, envs, train)
    scored = [e for e in found if e.reward > floor and e.state]
    if not scored:
        raise FewshotError("no decision above the floor with a readable state in the episodes")
    threshold = float(np.quantile([e.reward for e in scored], quantile))
    return [e for e in scored if e.reward >= threshold]


def read_episodes(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """Episodes (one JSON object a line) from trajectory files."""
    episodes = []
    for path in paths:
        if not path.is_file():
            raise FewshotError(f"no such episodes file: {path}")
        with path.open() as handle:
            episodes += [json.loads(line) for line in handle if line.strip()]
    return episodes


def write_pool(path: Path, examples: Iterable[Example]) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(asdict(example)) for example in examples]
    path.write_text("".join(line + "\n" for line in lines))
    return len(lines)


def read_pool(path: Path) -> list[Example]:
    if not path.is_file():
        raise FewshotError(f"few-shot pool: no such file: {path}")
    with path.open() as handle:
        return [Example(**json.loads(line)) for line in handle if line.strip()]


class Retriever:
    """The k nearest pool entries to a state, on features standardised over the pool."""

    def __init__(self, examples: Sequence[Example], k: int) -> None:
        if k < 1:
            raise FewshotError(f"fewshot_k must be at least 1, got {k}")
        if not examples:
            raise FewshotError("few-shot pool is empty")
        self.examples = list(examples)
        self.k = k
        self.names = sorted(set().union(*(e.state for e in self.examples)))
        matrix = np.array([[e.state.get(n, math.nan) for n in self.names] for e in examples])
        self.center = np.nanmean(matrix, axis=0)
        spread = np.nanstd(matrix, axis=0)
        self.spread = np.where(spread > 0, spread, 1.0)
        self.points = np.nan_to_num((matrix - self.center) / self.spread)

    def nearest(self, state: Mapping[str, float], exclude_task: int | None = None) -> list[Example]:
        """The k entries nearest `state`, nearest first, none from task `exclude_task`."""
        query = np.array([state.get(n, math.nan) for n in self.names])
        query = np.nan_to_num((query - self.center) / self.spread)
        distances = np.linalg.norm(self.points - query, axis=1)
        order = sorted(range(len(self.examples)), key=lambda i: (distances[i], i))
        chosen = [self.examples[i] for i in order if self.examples[i].task_id != exclude_task]
        return chosen[: self.k]


def format_examples(examples: Sequence[Example], header: str = HEADER) -> str:
    """The prompt block: one line per example, its state then its decision."""
    lines = [header]
    for number, example in enumerate(examples, 1):
        state = ", ".join(f"{name} {value:g}" for name, value in example.state.items())
        lines.append(f"{number}. {state} -> {example.action}")
    return "\n".join(lines)
