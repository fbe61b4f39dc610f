"""The agent loop's settings, importable without verl (the config generator writes them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

AGENT_NAME = "agenttrain"
"""The `agent_name` column value that selects this loop."""


class LoopSettings(BaseModel):
    """The agent loop's own settings: the extra keys of its entry in verl's
    `agent_loop_config_path` YAML (written by `agenttrain verl config`)."""

    model_config = ConfigDict(extra="forbid")

    servers: dict[str, list[str]] = Field(default_factory=dict)
    """Per environment name: AgentGym-compatible server URLs (none: in-process)."""
    env_kwargs: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Per environment name: constructor arguments of in-process instances."""
    token: str | None = None
    action_format: Literal["react", "adapt", "json", "raw"] = "react"
    max_turns: int | None = Field(None, ge=1, description="default: the environment's")
    max_new_tokens: int | None = Field(None, ge=1, description="per turn; default: no cap")
    env_timeout_s: float = Field(60.0, gt=0)
    max_format_errors: int = Field(3, ge=1)
    reward: Literal["last", "sum"] | None = None
    """Episode reward from step rewards; None: the environment's rule (`EnvSpec.episode_reward`)."""
    reward_function: bool = False
    """Leave `reward_score` unset so verl scores episodes with its reward function
    (`reward.custom_reward_function`); our per-episode fields reach it in `extra_info`."""


LOOP_TARGET = "agenttrain.integrations.verl.agent_loop.AgentTrainAgentLoop"


def loop_entry(settings: LoopSettings | Mapping[str, Any]) -> dict[str, Any]:
    """This loop's entry for verl's `actor_rollout_ref.rollout.agent.agent_loop_config_path`:
    name, target class and our settings as extra constructor keys."""
    values = settings if isinstance(settings, LoopSettings) else LoopSettings(**settings)
    return {"name": AGENT_NAME, "_target_": LOOP_TARGET, **values.model_dump(mode="json")}
