"""Curricula: the max-turn schedule (ScalingInter-RL: short horizons first, longer ones
later) and oracle starts (R3: start part-way along the oracle's solution, earlier later)."""

from __future__ import annotations

import random
from collections.abc import Sequence

from agenttrain.config import ConfigError
from agenttrain.envs import EnvSpec
from agenttrain.rl.config import TrainConfig, TurnsStage
from agenttrain.rollout.engine import derive_seed


def max_turns_at(step: int, schedule: Sequence[TurnsStage], default: int) -> int:
    """The turn limit for `step`: the first stage whose `until_step` covers it, else the last
    stage's limit (or `default` without a schedule)."""
    for stage in schedule:
        if step <= stage.until_step:
            return stage.max_turns
    return schedule[-1].max_turns if schedule else default


def oracle_share(config: TrainConfig, step: int, slot: int) -> float:
    """The share of the oracle's plan that task slot `slot`'s group starts from at `step`:
    uniform below the fading cap, the same for every episode of the group (one baseline)."""
    cap = config.data.oracle_start.share_cap(step)
    if not cap:
        return 0.0
    return cap * random.Random(derive_seed(config.run.seed, "guided", slot)).random()


def check_oracle_start(config: TrainConfig, specs: Sequence[EnvSpec]) -> None:
    """Oracle starts need an oracle in every training environment to play them, and an
    episode-level estimator (GiGPO's step groups would mix the oracle's turns in)."""
    share = config.data.oracle_start.max_share
    if not share:
        return
    missing = [spec.name for spec in specs if spec.oracle is None]
    if missing:
        raise ConfigError(
            f"data.oracle_start.max_share={share}: {', '.join(missing)} has no oracle "
            "to play the first turns; set data.oracle_start.max_share=0"
        )
    if config.algorithm.adv_estimator == "gigpo":
        raise ConfigError(
            f"data.oracle_start.max_share={share} does not combine with "
            "algorithm.adv_estimator=gigpo; use grpo, rloo or reinforce_plus_plus_baseline"
        )
