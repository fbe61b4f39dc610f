"""The success rate an evaluation shows while it runs.

Episodes end out of order: a solved one ends in a few turns, a failed one plays to the turn
limit. The share solved among the episodes ended so far therefore overstates the final rate
(34% shown at 180 of 400 episodes, 25.8% final, in one TextCraft evaluation). Episodes start
in play order, which is a random order of the tasks, so the longest *prefix* of that order in
which every episode has ended is a random sample with no such bias; its rate is the estimate.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence


class RunningRate:
    """Success counts over the ended episodes and over the fully ended prefix of play order."""

    def __init__(self, order: Sequence[Hashable]) -> None:
        self._position = {key: index for index, key in enumerate(order)}
        self._outcome: list[bool | None] = [None] * len(order)
        self._prefix = 0  # episodes 0 .. _prefix - 1 have all ended
        self._prefix_solved = 0
        self.ended = 0
        self.solved = 0

    def add(self, key: Hashable, success: bool) -> None:
        """Record that the episode `key` ended, solved or not."""
        self._outcome[self._position[key]] = success
        self.ended += 1
        self.solved += success
        while self._prefix < len(self._outcome) and self._outcome[self._prefix] is not None:
            self._prefix_solved += bool(self._outcome[self._prefix])
            self._prefix += 1

    def estimate(self) -> float | None:
        """The solved share of the ended prefix of play order; None before it has any episode."""
        return self._prefix_solved / self._prefix if self._prefix else None

    def describe(self) -> str:
        """`solved 61 · ~27%` for the progress line: the count, then the unbiased estimate."""
        estimate = self.estimate()
        return f"{self.solved}" + (f" · ~{estimate:.0%}" if estimate is not None else "")
