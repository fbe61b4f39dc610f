"""Where a run's environments come from: one object, built once per run from config.

Train, eval, play and demos all ask an `EnvSource` for environments instead of each deciding
in-process vs server on its own. It decides once, checks every server's identity once (before
the first episode, so a wrong or dead URL fails at start-up, not as a run of env errors), keeps
one HTTP pool for the whole run, and hands out `Environment`s that behave the same either way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agenttrain.envs.base import Environment, EnvSpec
from agenttrain.envs.make import make_env
from agenttrain.envs.registry import NotInProcess, get_spec, registration

if TYPE_CHECKING:
    from agenttrain.serving.client import EnvServerPool


class EnvSourceError(ValueError):
    """The environment settings cannot work together (e.g. kwargs for a remote server)."""


class EnvSource:
    """Environments of one kind for one run: in-process instances, or sessions on servers.

    Use as `async with source:` (or `await source.open()` / `await source.aclose()`) inside the
    event loop that will play the episodes; the HTTP pool belongs to that loop.
    """

    def __init__(
        self,
        name: str,
        *,
        kwargs: Mapping[str, Any] | None = None,
        servers: Sequence[str] = (),
        token: str | None = None,
        timeout_s: float = 60.0,
    ) -> None:
        self.spec: EnvSpec = get_spec(name)
        self.kwargs = dict(kwargs or {})
        self.servers = list(servers)
        self.token = token
        self.timeout_s = timeout_s
        self._pool: EnvServerPool | None = None
        if self.kwargs:
            registration(name).check_kwargs(self.kwargs)
        if self.servers and self.kwargs:
            raise EnvSourceError(
                f"env.kwargs {sorted(self.kwargs)} configure in-process {self.spec.name} "
                f"instances; the servers {', '.join(self.servers)} were started with their own "
                "settings (pass them to `agenttrain serve` instead)"
            )
        if not self.servers and not registration(name).in_process:
            raise NotInProcess(
                f"{self.spec.display_name} does not run in-process here "
                f"({self.spec.requirements}); give its AgentGym server's URL "
                "(env.servers / --server URL)"
            )

    @property
    def remote(self) -> bool:
        return bool(self.servers)

    def describe(self) -> str:
        """Where episodes run, for logs and reports."""
        return ", ".join(self.servers) if self.remote else "in-process"

    async def open(self, tasks: Iterable[int] = ()) -> None:
        """Open the HTTP pool and check every server's identity, and that every server has
        the run's `tasks` (by task identity where ids are not portable); a no-op in-process."""
        if not self.remote or self._pool is not None:
            return
        from agenttrain.serving.client import EnvServerPool

        pool = EnvServerPool(self.spec, self.servers, token=self.token, timeout_s=self.timeout_s)
        try:
            await pool.verify()
            await pool.check_tasks(tasks)
        except BaseException:
            await pool.aclose()
            raise
        self._pool = pool

    async def aclose(self) -> None:
        """Close every session still open and the connections."""
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.aclose()

    async def __aenter__(self) -> EnvSource:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def environment(self) -> Environment:
        """A new environment (one episode at a time); close it when the episode ends."""
        if not self.remote:
            return make_env(self.spec.name, **self.kwargs)
        if self._pool is None:
            raise RuntimeError("EnvSource.environment() before open(): use `async with source:`")
        return self._pool.environment()
