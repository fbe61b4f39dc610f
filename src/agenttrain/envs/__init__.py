"""Environments: the `Environment` protocol, the registry, and the built-in environments.

This package imports nothing from rollout, policy or training code.
"""

from agenttrain.envs.actions import InvalidAction, Oracle, PlannedAction
from agenttrain.envs.base import (
    EnvError,
    Environment,
    EnvironmentNotReset,
    EnvSpec,
    LocalEnvironment,
    Message,
    Observation,
    StepResult,
    WireProtocol,
)
from agenttrain.envs.make import make_env
from agenttrain.envs.registry import (
    DuplicateEnvironment,
    EnvKwargsError,
    EnvUnavailable,
    NotInProcess,
    Registration,
    UnknownEnvironment,
    get_spec,
    register,
    registrations,
)

__all__ = [
    "DuplicateEnvironment",
    "EnvError",
    "EnvKwargsError",
    "EnvSpec",
    "EnvUnavailable",
    "Environment",
    "EnvironmentNotReset",
    "InvalidAction",
    "LocalEnvironment",
    "Message",
    "NotInProcess",
    "Observation",
    "Oracle",
    "PlannedAction",
    "Registration",
    "StepResult",
    "UnknownEnvironment",
    "WireProtocol",
    "get_spec",
    "make_env",
    "register",
    "registrations",
]
