"""Environments: the `Environment` protocol, the registry, and the built-in environments.

This package imports nothing from rollout, policy or training code.
"""

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
from agenttrain.envs.registry import (
    NotInProcess,
    Registration,
    UnknownEnvironment,
    get_spec,
    make_env,
    register,
    registrations,
)

__all__ = [
    "EnvError",
    "EnvSpec",
    "Environment",
    "EnvironmentNotReset",
    "LocalEnvironment",
    "Message",
    "NotInProcess",
    "Observation",
    "Registration",
    "StepResult",
    "UnknownEnvironment",
    "WireProtocol",
    "get_spec",
    "make_env",
    "register",
    "registrations",
]
