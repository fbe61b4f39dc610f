"""Household economics: monthly work and consumption decisions as strict JSON (`econ`,
`econ_year`)."""

from agenttrain.envs.econ.env import SCHEMA, SPEC, YEAR_SPEC, EconEnv, EconYearEnv, describe_state
from agenttrain.envs.econ.model import Household, best_decision, initial_household, score

__all__ = [
    "SCHEMA",
    "SPEC",
    "YEAR_SPEC",
    "EconEnv",
    "EconYearEnv",
    "Household",
    "best_decision",
    "describe_state",
    "initial_household",
    "score",
]
