"""TextCraft (ADaPT / AgentGym): craft a Minecraft item from basic ingredients."""

from agenttrain.envs.textcraft.env import SPEC, TextCraftEnv

__all__ = ["SPEC", "TextCraftEnv"]
