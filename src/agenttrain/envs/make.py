"""`make_env`: a new instance of an environment, wherever it runs on this machine.

Above both the registry (what an environment is) and the worker pools (where
process-isolated ones run), so neither imports the other's user.
"""

from __future__ import annotations

from typing import Any

from agenttrain.envs.base import Environment
from agenttrain.envs.registry import registration
from agenttrain.envs.workers import shared_pool


def make_env(name: str, **overrides: Any) -> Environment:
    """A new instance of environment `name`, its defaults updated by `overrides`: in this
    process, or in the shared pool of worker processes for one registered with
    `process_workers` (SciWorld: a JVM per worker)."""
    entry = registration(name)
    if entry.factory is None or not entry.process_workers:
        return entry.build(**overrides)
    entry.check_kwargs(overrides)
    kwargs = {**entry.defaults, **overrides}
    return shared_pool(entry.spec.name, entry.process_workers, kwargs).environment()
