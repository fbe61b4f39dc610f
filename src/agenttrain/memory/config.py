"""`memory.*`: the experience pool of a training run (AgentEvolver's exp_manager settings)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from agenttrain.memory.embedding import Retrieval
from agenttrain.run.config import Section

RolloutMode = Literal["woexp", "all", "mixed"]


class MemoryConfig(Section):
    enabled: bool = False
    """Keep an experience pool: summarize each step's training episodes into it and (by
    `rollout_mode`) inject retrieved experience into rollouts."""
    rollout_mode: RolloutMode = "mixed"
    """woexp: no rollout gets experience (the pool still fills); all: every rollout;
    mixed: `rollout_ratio` of each group, exactly."""
    rollout_ratio: float = Field(0.5, ge=0, le=1)
    """mixed only: round(group_size × ratio) episodes of every group get experience."""
    top_k: int = Field(3, ge=1, description="experiences retrieved per episode")
    off_clip_ratio_high: float = Field(0.6, ge=0)
    """Upper PPO clip of episodes played with experience (AgentEvolver's off_cliprange_high);
    the others keep actor.clip_ratio_high."""
    update_freq: int = Field(1, ge=0, description="summarize every N steps; 0: never")
    summarizer: str = "rules"
    """rules, or openai:<model> (an OpenAI-compatible API; key from $OPENAI_API_KEY)."""
    summarizer_base_url: str | None = None
    retrieval: Retrieval = "auto"
    """embedding (needs the `memory` extra), bm25, or auto: embedding when installed."""
    url: str | None = None
    """A ReMe-compatible server (`agenttrain memory serve`, or ReMe itself) instead of the
    in-process pool at <run>/memory/pool.sqlite."""
    workspace_id: str = "default"
    seed_from: list[Path] = Field(default_factory=list)
    """Episode files (`agenttrain demos` output, an evaluation's episodes.jsonl on the train
    split) summarized into the pool before the first step, so the first rollouts already
    have experience to retrieve. Training-split episodes only (checked, as for the run's own)."""

    @model_validator(mode="after")
    def _consistent(self) -> MemoryConfig:
        if not self.enabled:
            fields = type(self).model_fields
            changed = [
                name
                for name, f in fields.items()
                if getattr(self, name) != f.get_default(call_default_factory=True)
            ]
            if changed:
                raise ValueError(
                    f"memory.{changed[0]} is set but memory.enabled is false, which ignores "
                    "it: set memory.enabled=true"
                )
            return self
        ratio_changed = self.rollout_ratio != type(self).model_fields["rollout_ratio"].default
        if self.rollout_mode != "mixed" and ratio_changed:
            raise ValueError(
                f"memory.rollout_ratio applies to memory.rollout_mode=mixed only (it is "
                f"{self.rollout_mode}; allowed modes: woexp, all, mixed)"
            )
        if self.summarizer != "rules" and not (
            self.summarizer.startswith("openai:") and len(self.summarizer) > len("openai:")
        ):
            raise ValueError(
                f"memory.summarizer={self.summarizer!r}: use 'rules' or 'openai:<model>'"
            )
        if self.url is not None and self.summarizer != "rules":
            raise ValueError(
                "memory.summarizer applies to the in-process pool; with memory.url the "
                "server summarizes (unset one of them)"
            )
        return self

    def guided_samples(self, group_size: int, seed: int) -> set[int]:
        """Which samples of a group get experience: none, all, or exactly
        round(group_size × rollout_ratio) at positions drawn from `seed` (AgentEvolver's rule,
        Python's round)."""
        if not self.enabled or self.rollout_mode == "woexp":
            return set()
        if self.rollout_mode == "all":
            return set(range(group_size))
        count = round(group_size * self.rollout_ratio)
        return set(random.Random(seed).sample(range(group_size), count))
