"""The session routes: `/create`, `/reset`, `/step`, `/observation`, `/detail`, the
protocol's queries and `/close`, and the session store's upkeep (one request at a time per
session, environment crashes as `{"error"}`, idle sessions swept).

Like AgentGym, a failed request on a known route answers HTTP 200 `{"error": "..."}`.
"""

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query
from fastapi.responses import Response

from agenttrain.envs.base import WireProtocol
from agenttrain.serving.http import JSON
from agenttrain.serving.routes.agentgym import (
    detail_payload,
    finished_refusal,
    observation_payload,
    query_routes,
    request_models,
    reset_payload,
    step_payload,
    well_formed,
)
from agenttrain.serving.sessions import Session, SessionCapReached, SessionStore, UnknownSession

# The name the server's log lines have always carried (`serve` prints it in each line).
log = logging.getLogger("agenttrain.serving.server")


def session_routes(proto: WireProtocol, store: SessionStore, guard: list[Any]) -> APIRouter:
    """The routes that act on the sessions of `store`, in the dialect of `proto`."""
    router = APIRouter()
    id_field = proto.id_field
    ResetRequest, StepRequest, CloseRequest = request_models(proto)
    with_session = functools.partial(_with_session, store)

    @router.post("/create", dependencies=guard)
    async def create(body: Annotated[dict[str, Any] | None, Body()] = None) -> Response:
        # The body (TextCraft's `commands`/`goal`) is accepted and ignored, as AgentGym does.
        return await _create(proto, store)

    @router.post("/reset", dependencies=guard)
    async def reset(body: ResetRequest) -> Response:  # type: ignore[valid-type]
        task_id = getattr(body, proto.task_field)
        return await with_session(getattr(body, id_field), lambda s: _reset(proto, s, task_id))

    @router.post("/step", dependencies=guard)
    async def step(body: StepRequest) -> Response:  # type: ignore[valid-type]
        action = well_formed(body.action)
        return await with_session(getattr(body, id_field), lambda s: _step(proto, s, action))

    @router.get("/observation", dependencies=guard)
    async def observation(session_id: Annotated[int, Query(alias=id_field)]) -> Response:
        return await with_session(session_id, lambda s: _answer(observation_payload(proto, s)))

    @router.get("/detail", dependencies=guard)
    async def detail(session_id: Annotated[int, Query(alias=id_field)]) -> Response:
        return await with_session(session_id, lambda s: _answer(detail_payload(proto, s)))

    # Before /close: the OpenAPI document lists the paths in the order they were added.
    router.include_router(query_routes(proto, with_session, guard))

    @router.post("/close", dependencies=guard)
    async def close(body: CloseRequest) -> Response:  # type: ignore[valid-type]
        # AgentGym answers false for any id it cannot close, issued or not.
        return JSON(await store.close(getattr(body, id_field)))

    return router


async def _create(proto: WireProtocol, store: SessionStore) -> Response:
    try:
        session = store.create()
    except SessionCapReached as refusal:
        return JSON({"error": str(refusal)}, status_code=503, headers={"Retry-After": "1"})
    if not proto.create_returns_observation:
        return JSON({proto.id_field: session.id} if proto.id_field == "id" else session.id)
    # AgentGym's TextCraft resets a new env to task == its id and returns that state.
    try:
        return await _reset(proto, session, session.id)
    except Exception as crash:  # do not keep a half-made session
        await store.close(session.id)
        return _crash_response(session, crash)


async def _reset(proto: WireProtocol, session: Session, task_id: int) -> Response:
    first = await session.env.reset(task_id)
    # The wire carries the environment's own observation and reward where the agent's first
    # observation adds to it (SciWorld: the task description, and its first step's reward).
    session.observation = str(first.info.get("observation", first.text))
    session.reward, session.done = float(first.info.get("reward", 0.0)), False
    session.fields = {k: first.info.get(k) for k in proto.reset_fields if k in first.info}
    return JSON(reset_payload(proto, session))


async def _step(proto: WireProtocol, session: Session, action: str) -> Response:
    refusal = finished_refusal(proto, session)
    if refusal is not None:
        return refusal
    result = await session.env.step(action)
    session.observation, session.reward, session.done = (
        result.observation,
        result.reward,
        result.done,
    )
    session.fields.update({k: result.info.get(k) for k in proto.step_info_fields})
    return JSON(step_payload(proto, session, result))


async def _answer(payload: Any) -> Response:
    return JSON(payload)


async def _with_session(
    store: SessionStore, session_id: int, action: Callable[[Session], Awaitable[Response]]
) -> Response:
    try:
        session = store.get(session_id)
    except UnknownSession as unknown:
        return JSON({"error": str(unknown)})
    return await _guarded(session, lambda: action(session))


async def _guarded(session: Session, action: Callable[[], Awaitable[Response]]) -> Response:
    """Run one request on a session, one at a time; an environment crash becomes {"error"}."""
    async with session.lock:
        try:
            return await action()
        except Exception as crash:  # AgentGym's contract: errors are data, never a 500
            return _crash_response(session, crash)


def _crash_response(session: Session, crash: Exception) -> Response:
    log.error("session %d: environment error", session.id, exc_info=crash)
    return JSON({"error": f"{type(crash).__name__}: {crash}"})


async def expire_periodically(store: SessionStore, interval_s: float) -> None:
    """Close idle sessions every `interval_s` until cancelled; a failed sweep is logged."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await store.expire_idle()
        except Exception:
            log.exception("expiring idle sessions failed")
