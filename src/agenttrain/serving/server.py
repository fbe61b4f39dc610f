"""An HTTP server for any registered environment, speaking AgentGym's wire protocol exactly.

Routes and field names follow the environment's `WireProtocol` (for TextCraft: `/`,
`/create`, `/reset`, `/step`, `/observation`, `/detail`, `/close`, the `id` dialect), so
unmodified AgentGym clients work against it. Like AgentGym, a failed request on a known
route answers HTTP 200 `{"error": "..."}`; malformed bodies get FastAPI's 422. Beyond
AgentGym: `/health`, a session cap (503 with Retry-After), idle sessions closed after a TTL,
an optional bearer token, and ids that are never reused.

This module builds the app; the routes live in `serving/routes/` by concern (`identity`,
`sessions`, `agentgym`), the HTTP plumbing (orjson answers, body limit, token) in
`serving/http.py`.
"""

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

from fastapi import Depends, FastAPI

import agenttrain
from agenttrain.envs.base import Environment, EnvSpec
from agenttrain.envs.registry import registration
from agenttrain.envs.workers import WorkerPool
from agenttrain.serving.http import BodyLimit, Unauthorized, bearer_guard, unauthorized
from agenttrain.serving.routes.identity import identity_routes
from agenttrain.serving.routes.sessions import expire_periodically, session_routes
from agenttrain.serving.sessions import SessionStore

DEFAULT_MAX_SESSIONS = 1024
DEFAULT_SESSION_TTL_S = 1800.0
MAX_BODY_BYTES = 1 << 20
"""Requests are small JSON objects; a bigger body is refused (413) instead of read."""


def create_app(
    env_name: str,
    *,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    session_ttl_s: float = DEFAULT_SESSION_TTL_S,
    token: str | None = None,
    reap_interval_s: float | None = None,
    workers: int | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
) -> FastAPI:
    """The server app for one in-process environment, each instance built with `env_kwargs`
    (e.g. BabyAI's `agentgym_compat=True`). With `workers` (and always for an environment
    registered with `process_workers`, SciWorld), sessions run in a pool of that many worker
    processes: a crashed worker fails only its own sessions."""
    spec, pool, factory = _environments(env_name, workers, env_kwargs)
    store = SessionStore(factory, max_sessions=max_sessions, ttl_s=session_ttl_s)
    interval = reap_interval_s if reap_interval_s is not None else min(30.0, session_ttl_s / 4)
    app = FastAPI(
        title=f"agenttrain {spec.display_name} server",
        description=f"AgentGym-compatible server for {spec.display_name}. {spec.description}",
        version=agenttrain.__version__,
        lifespan=_lifespan(store, pool, interval),
        # Per-request OpenTelemetry hooks cost ~10% of a step; export is opt-in elsewhere.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.add_middleware(BodyLimit, limit=MAX_BODY_BYTES)
    app.state.store, app.state.spec, app.state.pool = store, spec, pool
    app.add_exception_handler(Unauthorized, unauthorized)
    guard = [Depends(bearer_guard(token))] if token else []
    app.include_router(identity_routes(spec, store, pool, guard))
    app.include_router(session_routes(spec.protocol, store, guard))
    return app


def _environments(
    env_name: str, workers: int | None, env_kwargs: Mapping[str, Any] | None
) -> tuple[EnvSpec, WorkerPool | None, Callable[[], Environment]]:
    """The environment's spec, its worker pool if its sessions run in worker processes, and
    how a new session gets its environment."""
    entry = registration(env_name)
    if entry.factory is None:
        raise ValueError(
            f"{entry.spec.display_name} cannot be served from here: {entry.spec.requirements}"
        )
    kwargs = dict(env_kwargs or {})
    entry.check_options(kwargs)
    pool_size = workers or entry.process_workers
    pool = (
        WorkerPool(entry.spec.name, pool_size, {**entry.defaults, **kwargs}) if pool_size else None
    )
    factory = pool.environment if pool is not None else functools.partial(entry.build, **kwargs)
    return entry.spec, pool, factory


def _lifespan(
    store: SessionStore, pool: WorkerPool | None, reap_interval_s: float
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """While the app runs, idle sessions are swept; at shutdown every session is closed and
    the worker pool stopped."""

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        reaper = asyncio.create_task(expire_periodically(store, reap_interval_s))
        try:
            yield
        finally:
            reaper.cancel()
            await store.close_all()
            if pool is not None:
                pool.shutdown()

    return lifespan
