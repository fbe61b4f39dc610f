"""BabyAI (AgentGym): 40 minigrid levels played through a text view and high-level actions.

The package holds everything about it: the levels and task mapping (`levels`), the text
view and action compiler (`view`), the rules of an episode with AgentGym's defects fixed or
kept (`game`), the prompt (`env.SPEC`), how a ReAct reply becomes an action (`actions`) and
the oracle.
"""

from agenttrain.envs.babyai.env import SPEC, BabyAIEnv

__all__ = ["SPEC", "BabyAIEnv"]
