"""Reward file for `econ` with verl's signature (use it as reward.custom_function.path).

The seed workflow's rule: a reply that is not exactly one JSON object
{"work": w, "consumption": c} with both fields in [0, 1] scores -1; otherwise the decision's
utility-based score in (0, 1] (agenttrain.envs.econ.score). For multi-month episodes
(`econ_year`) it overrides the final score: -1 when any month's reply broke the format,
else the environment's mean monthly score.

    reward:
      custom_function: {path: examples/rewards/econ_reward.py, name: compute_score}
"""

from __future__ import annotations

from typing import Any

from agenttrain.envs.econ import SCHEMA, initial_household, score
from agenttrain.envs.json_action import JsonFormatError

FORMAT_PENALTY = -1.0


def compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None
) -> float:
    extra_info = extra_info or {}
    if extra_info.get("num_turns", 1) > 1:
        months = extra_info.get("turn_scores", [])
        return FORMAT_PENALTY if any(m < 0 for m in months) else float(extra_info["env_reward"])
    try:
        decision = SCHEMA.parse(solution_str)
    except JsonFormatError:
        return FORMAT_PENALTY
    state = initial_household(int(ground_truth))  # the task id, as in verl's parquet rows
    return score(state, decision["work"], decision["consumption"])
