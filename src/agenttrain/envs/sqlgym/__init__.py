"""SQLGym (AgentGym's text-to-SQL on BIRD) in-process over SQLite, with a bundled task set.

The package holds everything about it: the BIRD reader (`bird`), the bundled databases and
questions (`databases`, `questions`, `bundled`), AgentGym's schema text (`schema`), the
execution-match reward (`execution`), the environment and its spec (`env`) and the oracle.
"""

from agenttrain.envs.sqlgym.env import SPEC, SqlGymEnv

__all__ = ["SPEC", "SqlGymEnv"]
