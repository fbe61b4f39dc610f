"""Environments by name: built-in ones, and plug-ins from the `agenttrain.envs` entry point.

A plug-in package declares `[project.entry-points."agenttrain.envs"] myenv = "pkg:register"`
where `register()` calls `agenttrain.envs.register("myenv", MyEnv, **defaults)`; it is then
served, evaluated and trained on like a built-in environment, configured from YAML through
`env.kwargs` (passed to `make_env(name, **kwargs)`).
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from types import MappingProxyType
from typing import Any

from agenttrain.envs.base import Environment, EnvSpec

EnvFactory = Callable[..., Environment]
"""A class or function that builds an in-process environment from keyword arguments."""


@dataclass(frozen=True)
class Registration:
    spec: EnvSpec
    factory: EnvFactory | None
    """Builds an in-process instance; None when the environment only runs behind a server."""
    defaults: Mapping[str, Any] = field(default_factory=dict)
    """Keyword arguments every instance is built with unless `make_env` overrides them."""
    process_workers: int = 0
    """0: instances live in the caller's process. N: they run in a pool of up to N worker
    processes (environments that are not thread-safe or hold a JVM, such as SciWorld)."""

    @property
    def in_process(self) -> bool:
        return self.factory is not None

    def parameters(self) -> list[str] | None:
        """The keyword arguments the factory accepts; None when it takes any (`**kwargs`)."""
        if self.factory is None:
            return []
        accepted = []
        for parameter in inspect.signature(self.factory).parameters.values():
            if parameter.kind is parameter.VAR_KEYWORD:
                return None
            if parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY):
                accepted.append(parameter.name)
        return accepted

    def check_kwargs(self, kwargs: Mapping[str, Any]) -> None:
        """Refuse keyword arguments the factory does not take, naming the ones it does."""
        accepted = self.parameters()
        unknown = [] if accepted is None else sorted(set(kwargs) - set(accepted))
        if unknown:
            allowed = ", ".join(accepted or []) or "none"
            raise EnvKwargsError(
                f"environment {self.spec.name!r} takes no parameter "
                f"{', '.join(map(repr, unknown))}; accepted parameters: {allowed}"
            )

    def build(self, **overrides: Any) -> Environment:
        """A new instance built with the defaults updated by `overrides`."""
        if self.factory is None:
            raise NotInProcess(
                f"{self.spec.display_name} does not run in-process here "
                f"({self.spec.requirements}); point agenttrain at an AgentGym server with "
                "--server URL"
            )
        self.check_kwargs(overrides)
        if self.process_workers:
            from agenttrain.envs.workers import shared_pool

            kwargs = {**self.defaults, **overrides}
            return shared_pool(self.spec.name, self.process_workers, kwargs).environment()
        return self.build_here(**overrides)

    def options(self) -> dict[str, Any]:
        """The constructor options an instance takes (name: default), e.g. BabyAI's
        `agentgym_compat`; what `serve --env-kwarg` and `env.kwargs` may set."""
        if self.factory is None:
            return {}
        try:
            parameters = inspect.signature(self.factory).parameters.values()
        except (TypeError, ValueError):
            return {}
        named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        return {
            p.name: self.defaults.get(p.name, None if p.default is p.empty else p.default)
            for p in parameters
            if p.kind in named and p.name != "self"
        }

    def check_options(self, kwargs: Mapping[str, Any]) -> None:
        """Refuse options the constructor does not take, naming those it does."""
        known = self.options()
        unknown = sorted(set(kwargs) - set(known))
        if unknown:
            offered = ", ".join(f"{k} (default {v!r})" for k, v in known.items()) or "none"
            raise ValueError(
                f"{self.spec.display_name} takes no option {', '.join(unknown)}; "
                f"its options: {offered}"
            )

    def build_here(self, **overrides: Any) -> Environment:
        """A new instance in this process, even for a process-isolated environment (what a
        worker process builds)."""
        if self.factory is None:
            raise NotInProcess(f"{self.spec.display_name} does not run in-process here")
        return self.factory(**{**self.defaults, **overrides})


class UnknownEnvironment(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


class NotInProcess(RuntimeError):
    """The environment exists but only runs behind a (remote) AgentGym server."""


class DuplicateEnvironment(ValueError):
    """A second registration of a name, without `replace=True`."""


class EnvKwargsError(TypeError):
    """Keyword arguments the environment's factory does not accept."""


_registry: dict[str, Registration] = {}
_loaded = False


def register(
    name: str,
    factory: EnvFactory | None = None,
    *,
    spec: EnvSpec | None = None,
    replace: bool = False,
    process_workers: int = 0,
    **defaults: Any,
) -> Registration:
    """Make an environment known by `name`.

    `factory` (a class or callable) builds in-process instances from `defaults`, updated per
    call by `make_env`; its spec is `factory.spec` unless `spec` is given. A server-only
    environment registers its `spec` alone. A name already taken is an error unless
    `replace=True`, so two plug-ins cannot silently shadow each other. `process_workers=N`
    runs instances in a pool of up to N worker processes (`agenttrain.envs.workers`).
    """
    _ensure_loaded()
    resolved = _spec_for(name, factory, spec)
    key = name.lower()
    if key in _registry and not replace:
        raise DuplicateEnvironment(
            f"environment {name!r} is already registered "
            f"({_origin(_registry[key])}); pass replace=True to replace it"
        )
    entry = Registration(resolved, factory, MappingProxyType(dict(defaults)), process_workers)
    entry.check_kwargs(defaults)
    _registry[key] = entry
    return entry


def _spec_for(name: str, factory: EnvFactory | None, spec: EnvSpec | None) -> EnvSpec:
    if not isinstance(name, str):  # the old form was register(spec, factory)
        raise TypeError(
            f"register() takes the environment's name first, not a {type(name).__name__}: "
            "register(name, factory, **defaults)"
        )
    resolved = spec if spec is not None else getattr(factory, "spec", None)
    if not isinstance(resolved, EnvSpec):
        raise TypeError(
            f"register({name!r}, ...) needs an EnvSpec: give the factory a `spec` attribute "
            "or pass spec=..."
        )
    if resolved.name.lower() != name.lower():
        raise ValueError(f"register({name!r}, ...) with a spec named {resolved.name!r}")
    return resolved


def _origin(entry: Registration) -> str:
    if entry.factory is None:
        return "as a server-only spec"
    factory = entry.factory
    return f"by {getattr(factory, '__module__', '?')}.{getattr(factory, '__qualname__', '?')}"


def _ensure_loaded() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    from agenttrain.envs.agentgym import REMOTE_SPECS
    from agenttrain.envs.alfworld import register_alfworld
    from agenttrain.envs.babyai import BabyAIEnv
    from agenttrain.envs.econ import EconEnv, EconYearEnv
    from agenttrain.envs.largest import LargestEnv
    from agenttrain.envs.sciworld import SciWorldEnv
    from agenttrain.envs.searchqa import SearchQAEnv
    from agenttrain.envs.sqlgym import SqlGymEnv
    from agenttrain.envs.textcraft import TextCraftEnv

    register("textcraft", TextCraftEnv)
    register("largest", LargestEnv)
    register("babyai", BabyAIEnv)
    register("econ", EconEnv)
    register("econ_year", EconYearEnv)
    register("sciworld", SciWorldEnv, process_workers=4)  # a JVM per worker process
    register("searchqa", SearchQAEnv)
    register("sqlgym", SqlGymEnv)  # BIRD from $AGENTTRAIN_BIRD_DIR, else the bundled set
    register_alfworld()  # in-process when `alfworld` and $ALFWORLD_DATA are here
    for spec in REMOTE_SPECS:
        if spec.name.lower() not in _registry:  # not ported in-process: its server only
            register(spec.name, spec=spec)
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


def make_env(name: str, **overrides: Any) -> Environment:
    """A new in-process instance of environment `name`, its defaults updated by `overrides`."""
    return registration(name).build(**overrides)


def registrations() -> list[Registration]:
    """All known environments, in-process ones first (TextCraft, the default, leading)."""
    _ensure_loaded()
    return sorted(
        _registry.values(),
        key=lambda r: (not r.in_process, r.spec.name != "textcraft", r.spec.name),
    )
