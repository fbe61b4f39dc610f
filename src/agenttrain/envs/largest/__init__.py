"""Largest Number: agenttrain's one-turn task with a verifiable answer, for quick RL runs."""

from agenttrain.envs.largest.env import SPEC, LargestEnv, numbers, question

__all__ = ["SPEC", "LargestEnv", "numbers", "question"]
