"""TextCraft (ADaPT / AgentGym): craft a Minecraft item from basic ingredients.

The package holds everything about it: recipes and tasks, the game and its reward, the
prompt (`env.SPEC`), how a ReAct reply becomes an action (`actions`) and the oracle.
"""

from agenttrain.envs.textcraft.env import SPEC, TextCraftEnv

__all__ = ["SPEC", "TextCraftEnv"]
