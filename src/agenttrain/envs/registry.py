"""Environments by name, each loaded on first use: built-in ones and plug-ins alike.

Every environment is an entry point `name = "module:object"`: the built-ins in `BUILT_IN`,
plug-ins in their package's `[project.entry-points."agenttrain.envs"]`. Asking for one name
imports only its module, so a missing optional dependency of one environment affects only
that environment. The object is an environment class (or factory) with a `spec`, an
`EnvSpec` alone (a server-only environment), or a function that calls
`agenttrain.envs.register(...)` itself (to pass defaults or `process_workers`). A plug-in is
then served, evaluated and trained on like a built-in environment, configured from YAML
through `env.kwargs` (passed to `make_env(name, **kwargs)`).
"""

from __future__ import annotations

import difflib
import inspect
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
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
        """A new instance in this process, built with the defaults updated by `overrides`
        (`make_env` puts process-isolated environments in worker processes instead)."""
        if self.factory is None:
            raise NotInProcess(
                f"{self.spec.display_name} does not run in-process here "
                f"({self.spec.requirements}); point agenttrain at an AgentGym server with "
                "--server URL"
            )
        self.check_kwargs(overrides)
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


class EnvUnavailable(UnknownEnvironment):
    """An environment's module could not be imported (a missing optional dependency): to
    its callers, as good as an unknown name, with the reason."""


GROUP = "agenttrain.envs"


def _built_in(name: str, target: str) -> EntryPoint:
    return EntryPoint(name, f"agenttrain.envs.{target}", GROUP)


BUILT_IN = (
    _built_in("textcraft", "textcraft:TextCraftEnv"),
    _built_in("largest", "largest:LargestEnv"),
    _built_in("babyai", "babyai:BabyAIEnv"),
    _built_in("econ", "econ:EconEnv"),
    _built_in("econ_year", "econ:EconYearEnv"),
    _built_in("sciworld", "sciworld:register_sciworld"),  # a JVM per worker process
    _built_in("searchqa", "searchqa:SearchQAEnv"),
    _built_in("sqlgym", "sqlgym:SqlGymEnv"),  # BIRD from $AGENTTRAIN_BIRD_DIR, else bundled
    _built_in("alfworld", "alfworld:register_alfworld"),  # in-process when installed
    _built_in("webshop", "agentgym:WEBSHOP"),  # AgentGym's server only
)
"""The built-in environments, declared as plug-ins are: name -> where to find it."""

_registry: dict[str, Registration] = {}
_tried: set[str] = set()
"""Entry points already loaded (or being loaded): each is imported once."""
log = logging.getLogger(__name__)


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
    resolved = _spec_for(name, factory, spec)
    key = name.lower()
    _load(key)  # a built-in or plug-in of that name first: a clash is then an error
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


def _entry_points() -> list[EntryPoint]:
    """Built-ins first, then the installed plug-ins."""
    return [*BUILT_IN, *entry_points(group=GROUP)]


def _load(key: str | None) -> None:
    """Import the entry point(s) named `key` (None: every one) not loaded yet."""
    for point in _entry_points():
        if (key is not None and point.name.lower() != key) or point.value in _tried:
            continue
        _tried.add(point.value)
        try:
            target = point.load()
        except ImportError as failure:
            raise EnvUnavailable(
                f"environment {point.name!r} could not be loaded from {point.value}: "
                f"{failure} (a missing optional dependency of this environment?)"
            ) from failure
        _register_target(point.name, target)


def _load_every() -> None:
    """Load every entry point; one that cannot load is left out with a warning."""
    for point in _entry_points():
        try:
            _load(point.name.lower())
        except EnvUnavailable as failure:
            log.warning("%s", failure)


def _register_target(name: str, target: Any) -> None:
    if isinstance(target, EnvSpec):
        register(name, spec=target)
    elif isinstance(getattr(target, "spec", None), EnvSpec):
        register(name, target)
    else:
        target()  # a function that registers the environment itself


def registration(name: str) -> Registration:
    key = name.lower()
    _load(key)
    if key not in _registry:
        _load_every()  # a plug-in may register names other than its entry point's
    if key not in _registry:
        known = sorted(_registry)
        close = difflib.get_close_matches(key, known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UnknownEnvironment(f"unknown environment {name!r}{hint}; known: {', '.join(known)}")
    return _registry[key]


def get_spec(name: str) -> EnvSpec:
    return registration(name).spec


def registrations() -> list[Registration]:
    """All known environments, in-process ones first (TextCraft, the default, leading)."""
    _load_every()
    return sorted(
        _registry.values(),
        key=lambda r: (not r.in_process, r.spec.name != "textcraft", r.spec.name),
    )
