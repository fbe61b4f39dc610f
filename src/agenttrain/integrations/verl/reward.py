"""verl's reward function for agenttrain episodes: the environment's own reward.

The agent loop (verl >= 0.8) normally returns the score itself (`reward_score`), so verl needs
no reward function. Two paths do need one, and this is it (`custom_reward_function.path` =
this file, `custom_reward_function.name=compute_score`):

- verl 0.7's `ToolAgentLoop` with our interaction never asks the interaction for a score, and
  verl's default scorer does not know `agenttrain/<env>` data sources. What reaches the reward
  function is `extra_info["turn_scores"]`: the interaction makes them sum to the episode's
  reward, and marks an env or agent error with NaN (`interaction.turn_score`).
- A recipe with `reward_function: true` in the agent loop's settings leaves the score to
  verl; the loop's own fields (`env_reward`, `env_error`, ...) are in `extra_info`.

An errored episode scores 0 with `env_error = 1` in the returned details, which verl logs per
data source: counted and shown, never folded into the score unnoticed.
"""

from __future__ import annotations

import math
from typing import Any

from agenttrain.envs import get_spec


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    **_: Any,
) -> dict[str, float]:
    """The episode's environment reward, its success and whether it errored (verl's
    `compute_score` signature; the text arguments are not needed: the environment judged)."""
    info = extra_info or {}
    if "env_reward" in info:  # the agent loop's fields
        errored = bool(info.get("env_error") or info.get("agent_error"))
        reward = float(info["env_reward"])
    elif "turn_scores" in info:  # verl 0.7's ToolAgentLoop with our interaction
        scores = [float(score) for score in info["turn_scores"] or []]
        errored = not scores or any(math.isnan(score) for score in scores)
        reward = 0.0 if errored else sum(scores)
    else:
        raise ValueError(
            f"agenttrain reward function: {data_source!r} row has neither the agent loop's "
            "fields nor verl 0.7's turn_scores in extra_info (is the agenttrain agent loop "
            "or interaction playing these rows?)"
        )
    score = 0.0 if errored else reward
    success = not errored and score >= get_spec(str(info["env"])).success_reward
    return {"score": score, "success": float(success), "env_error": float(errored)}
