"""Environments by name: built-in ones, and plug-ins from the `agenttrain.envs` entry point.

A plug-in package declares `[project.entry-points."agenttrain.envs"] myenv = "pkg:register"`
where `register()` calls `agenttrain.envs.register(...)`; it is then served, evaluated and
trained on like a built-in environment.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points

from agenttrain.envs.base import Environment, EnvSpec


@dataclass(frozen=True)
class Registration:
    spec: EnvSpec
    factory: Callable[[], Environment] | None
    """Builds an in-process instance; None when the environment only runs behind a server."""

    @property
    def in_process(self) -> bool:
        return self.factory is not None


class UnknownEnvironment(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


class NotInProcess(RuntimeError):
    """The environment exists but only runs behind a (remote) AgentGym server."""


_registry: dict[str, Registration] = {}
_loaded = False


def register(spec: EnvSpec, factory: Callable[[], Environment] | None = None) -> None:
    """Make an environment known by `spec.name` (a later registration replaces an earlier one)."""
    _registry[spec.name] = Registration(spec, factory)


def _ensure_loaded() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    from agenttrain.envs.agentgym import REMOTE_SPECS
    from agenttrain.envs.largest import SPEC as LARGEST
    from agenttrain.envs.largest import LargestEnv
    from agenttrain.envs.textcraft import SPEC as TEXTCRAFT
    from agenttrain.envs.textcraft import TextCraftEnv

    register(TEXTCRAFT, TextCraftEnv)
    register(LARGEST, LargestEnv)
    for spec in REMOTE_SPECS:
        register(spec)
    for plugin in entry_points(group="agenttrain.envs"):
        plugin.load()()


def registration(name: str) -> Registration:
    _ensure_loaded()
    key = name.lower()
    if key not in _registry:
        known = sorted(_registry)
        close = difflib.get_close_matches(key, known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UnknownEnvironment(f"unknown environment {name!r}{hint}; known: {', '.join(known)}")
    return _registry[key]


def get_spec(name: str) -> EnvSpec:
    return registration(name).spec


def make_env(name: str) -> Environment:
    """A new in-process instance of environment `name`."""
    entry = registration(name)
    if entry.factory is None:
        raise NotInProcess(
            f"{entry.spec.display_name} does not run in-process here "
            f"({entry.spec.requirements}); point agenttrain at an AgentGym server with --server URL"
        )
    return entry.factory()


def registrations() -> list[Registration]:
    """All known environments, in-process ones first (TextCraft, the default, leading)."""
    _ensure_loaded()
    return sorted(
        _registry.values(),
        key=lambda r: (not r.in_process, r.spec.name != "textcraft", r.spec.name),
    )
