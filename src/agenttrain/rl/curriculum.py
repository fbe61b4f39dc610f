"""Max-turn curriculum (ScalingInter-RL): short horizons first, longer ones later."""

from __future__ import annotations

from collections.abc import Sequence

from agenttrain.rl.config import TurnsStage


def max_turns_at(step: int, schedule: Sequence[TurnsStage], default: int) -> int:
    """The turn limit for `step`: the first stage whose `until_step` covers it, else the last
    stage's limit (or `default` without a schedule)."""
    for stage in schedule:
        if step <= stage.until_step:
            return stage.max_turns
    return schedule[-1].max_turns if schedule else default
