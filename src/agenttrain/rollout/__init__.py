"""Rollouts: multi-turn episodes as token ids, masks and log-probs, and their JSONL files."""

from agenttrain.rollout.engine import EpisodeRequest, RolloutConfig, RolloutEngine, derive_seed
from agenttrain.rollout.trajectory import Trajectory, Turn, read_jsonl, write_jsonl

__all__ = [
    "EpisodeRequest",
    "RolloutConfig",
    "RolloutEngine",
    "Trajectory",
    "Turn",
    "derive_seed",
    "read_jsonl",
    "write_jsonl",
]
