"""SciWorld (ScienceWorld, AgentGym): elementary-school science tasks in a text simulator.

The package holds everything about it: the 4,639 games and splits (`games`), the JVM
(`jvm`), the environment, its wire format and prompt (`env`), and the gold-path oracle.
It runs in worker processes (`agenttrain.envs.workers`): a JVM per worker, not per game.
"""

from agenttrain.envs.registry import Registration, register
from agenttrain.envs.sciworld.env import SPEC, SciWorldEnv

WORKERS = 4


def register_sciworld() -> Registration:
    """In worker processes: a JVM does not survive a fork and is not thread-safe."""
    return register("sciworld", SciWorldEnv, process_workers=WORKERS)


__all__ = ["SPEC", "SciWorldEnv", "register_sciworld"]
