"""Small measuring helpers shared by the trainer and the update: timers and min/mean/max."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from statistics import fmean


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
