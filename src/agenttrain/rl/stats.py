"""Small measuring helpers shared by the trainer and the update: timers, min/mean/max, and
how often episodes used each kind of action."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from statistics import fmean
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agenttrain.rollout.trajectory import Trajectory


@contextmanager
def timed(timing: dict[str, float], name: str) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:
        timing[f"timing_s/{name}"] = (
            timing.get(f"timing_s/{name}", 0.0) + time.perf_counter() - started
        )


def stats(prefix: str, values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {}
    return {
        f"{prefix}/mean": fmean(values),
        f"{prefix}/max": max(values),
        f"{prefix}/min": min(values),
    }


def actions_by_verb(
    episodes: Sequence[Trajectory], verbs: Mapping[str, Sequence[str]]
) -> dict[str, float]:
    """`rollout/actions/<verb>`: the mean count per episode of actions starting with each
    verb its environment declares (`EnvSpec.action_verbs`, here `verbs` by env name), over
    the episodes of environments that declare it."""
    counts: dict[str, list[int]] = {}
    for episode in episodes:
        first_words = [_first_word(turn.action) for turn in episode.turns]
        for verb in verbs.get(episode.env, ()):
            counts.setdefault(verb, []).append(first_words.count(verb))
    return {f"rollout/actions/{verb}": fmean(values) for verb, values in counts.items()}


def _first_word(action: str | None) -> str:
    words = (action or "").strip().lower().split(maxsplit=1)
    return words[0] if words else ""
