"""The server's identity and health: `GET /` (AgentGym's identity string, behind the token)
and `GET /health` (open to all: sessions, limits, counters, uptime, worker pool)."""

import time
from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response

import agenttrain
from agenttrain.envs.base import EnvSpec
from agenttrain.envs.workers import WorkerPool
from agenttrain.serving.http import JSON
from agenttrain.serving.sessions import SessionStore


def identity_routes(
    spec: EnvSpec, store: SessionStore, pool: WorkerPool | None, guard: list[Any]
) -> APIRouter:
    router = APIRouter()
    proto = spec.protocol
    started = time.time()

    @router.get("/", dependencies=guard)
    async def root() -> Response:
        return JSON(proto.root_text)

    @router.get("/health")
    async def health() -> Response:
        return JSON(
            {
                "status": "ok",
                "env": spec.name,
                "root_text": proto.root_text,
                "sessions": len(store),
                "max_sessions": store.max_sessions,
                "session_ttl_s": store.ttl_s,
                "sessions_created": store.created_total,
                "sessions_closed": store.closed_total,
                "sessions_expired": store.expired_total,
                "uptime_s": round(time.time() - started, 3),
                "agenttrain": agenttrain.__version__,
                **({"pool": pool.stats()} if pool is not None else {}),
            }
        )

    return router
