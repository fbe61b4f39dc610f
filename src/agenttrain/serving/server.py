"""An HTTP server for any registered environment, speaking AgentGym's wire protocol exactly.

Routes and field names follow the environment's `WireProtocol` (for TextCraft: `/`,
`/create`, `/reset`, `/step`, `/observation`, `/detail`, `/close`, the `id` dialect), so
unmodified AgentGym clients work against it. Like AgentGym, a failed request on a known
route answers HTTP 200 `{"error": "..."}`; malformed bodies get FastAPI's 422. Beyond
AgentGym: `/health`, a session cap (503 with Retry-After), idle sessions closed after a TTL,
an optional bearer token, and ids that are never reused.
"""

import asyncio
import contextlib
import functools
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Annotated, Any

import orjson
from fastapi import Body, Depends, FastAPI, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, create_model
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import agenttrain
from agenttrain.envs.base import EnvSpec, WireProtocol
from agenttrain.envs.registry import registration
from agenttrain.envs.workers import WorkerPool
from agenttrain.serving.sessions import Session, SessionCapReached, SessionStore, UnknownSession

log = logging.getLogger(__name__)

DEFAULT_MAX_SESSIONS = 1024
DEFAULT_SESSION_TTL_S = 1800.0
MAX_BODY_BYTES = 1 << 20
"""Requests are small JSON objects; a bigger body is refused (413) instead of read."""


class JSON(Response):
    """A JSON response rendered with orjson (the handlers build plain dicts and lists)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


class BodyLimit:
    """Refuses a request body over `limit` bytes with 413 `{"error"}` before a handler reads it.

    Starlette's own limit answers in plain text; every other refusal of ours is JSON. A
    declared Content-Length is checked up front; a chunked body is read here up to the limit
    and handed on whole.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared <= self.limit:
            await self.app(scope, receive, send)
            return
        body = None if declared is not None else await _read_at_most(receive, self.limit)
        if body is None:
            refusal = JSON({"error": f"request body larger than {self.limit} bytes"}, 413)
            await refusal(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length" and value.isdigit():
            return int(value)
    return None


async def _read_at_most(receive: Receive, limit: int) -> bytes | None:
    """The whole request body, or None once it grows past `limit`."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client went away
            return b"".join(chunks)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Message:
        return pending.pop() if pending else await receive()

    return replayed


def wire_number(value: float, as_float: bool = False) -> float | int:
    """A reward as AgentGym's server for the environment types it: TextCraft's integral
    values as ints (0/1); SQLGym's and SearchQA's always floats (`as_float`)."""
    if as_float:
        return float(value)
    return int(value) if float(value).is_integer() else value


def well_formed(text: str) -> str:
    """`text` with lone surrogates (a JSON `\\ud800` escape decodes to one) replaced by U+FFFD.
    Such a string cannot be encoded as UTF-8: the environment would echo it in its
    observation and every reply carrying that observation would fail to render."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _request_model(name: str, fields: dict[str, Any]) -> type[BaseModel]:
    # Extra keys are ignored, as in AgentGym (its TextCraft client sends `minecraft_dir`).
    return create_model(name, __config__=ConfigDict(extra="ignore"), **fields)


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
    entry = registration(env_name)
    if entry.factory is None:
        raise ValueError(
            f"{entry.spec.display_name} cannot be served from here: {entry.spec.requirements}"
        )
    spec = entry.spec
    proto = spec.protocol
    kwargs = dict(env_kwargs or {})
    entry.check_options(kwargs)
    pool_size = workers or entry.process_workers
    pool = WorkerPool(spec.name, pool_size, {**entry.defaults, **kwargs}) if pool_size else None
    factory = pool.environment if pool is not None else functools.partial(entry.build, **kwargs)
    store = SessionStore(factory, max_sessions=max_sessions, ttl_s=session_ttl_s)
    interval = reap_interval_s if reap_interval_s is not None else min(30.0, session_ttl_s / 4)
    started = time.time()

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        reaper = asyncio.create_task(_expire_periodically(store, interval))
        try:
            yield
        finally:
            reaper.cancel()
            await store.close_all()
            if pool is not None:
                pool.shutdown()

    app = FastAPI(
        title=f"agenttrain {spec.display_name} server",
        description=f"AgentGym-compatible server for {spec.display_name}. {spec.description}",
        version=agenttrain.__version__,
        lifespan=lifespan,
        # Per-request OpenTelemetry hooks cost ~10% of a step; export is opt-in elsewhere.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.add_middleware(BodyLimit, limit=MAX_BODY_BYTES)
    app.state.store = store
    app.state.spec = spec
    app.state.pool = pool
    app.add_exception_handler(_Unauthorized, _unauthorized)

    guard = [Depends(_bearer_guard(token))] if token else []
    id_field = proto.id_field
    task_default = ... if proto.task_required else 0  # AgentGym's 422, or its default
    ResetRequest = _request_model(
        "ResetRequest", {id_field: (int, ...), proto.task_field: (int, task_default)}
    )
    StepRequest = _request_model("StepRequest", {id_field: (int, ...), "action": (str, ...)})
    CloseRequest = _request_model("CloseRequest", {id_field: (int, ...)})

    @app.get("/", dependencies=guard)
    async def root() -> Response:
        return JSON(proto.root_text)

    @app.get("/health")
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

    @app.post("/create", dependencies=guard)
    async def create(body: Annotated[dict[str, Any] | None, Body()] = None) -> Response:
        # The body (TextCraft's `commands`/`goal`) is accepted and ignored, as AgentGym does.
        try:
            session = store.create()
        except SessionCapReached as refusal:
            return JSON({"error": str(refusal)}, status_code=503, headers={"Retry-After": "1"})
        if not proto.create_returns_observation:
            return JSON({id_field: session.id} if id_field == "id" else session.id)
        # AgentGym's TextCraft resets a new env to task == its id and returns that state.
        try:
            return await _reset(session, session.id)
        except Exception as crash:  # do not keep a half-made session
            await store.close(session.id)
            return _crash_response(session, crash)

    @app.post("/reset", dependencies=guard)
    async def reset(body: ResetRequest) -> Response:  # type: ignore[valid-type]
        task_id = getattr(body, proto.task_field)
        return await _with_session(getattr(body, id_field), lambda s: _reset(s, task_id))

    @app.post("/step", dependencies=guard)
    async def step(body: StepRequest) -> Response:  # type: ignore[valid-type]
        action = well_formed(body.action)
        return await _with_session(getattr(body, id_field), lambda s: _step(s, action))

    @app.get("/observation", dependencies=guard)
    async def observation(session_id: Annotated[int, Query(alias=id_field)]) -> Response:
        return await _with_session(session_id, lambda s: _const(JSON(_observation(proto, s))))

    @app.get("/detail", dependencies=guard)
    async def detail(session_id: Annotated[int, Query(alias=id_field)]) -> Response:
        return await _with_session(session_id, lambda s: _const(JSON(_detail(proto, s))))

    def _query_route(name: str) -> Callable[[int], Awaitable[Response]]:
        async def answer(session_id: Annotated[int, Query(alias=id_field)]) -> Response:
            return await _with_session(session_id, lambda s: _query(s, name))

        return answer

    for query in proto.queries:
        app.add_api_route(f"/{query}", _query_route(query), methods=["GET"], dependencies=guard)

    async def _query(session: Session, name: str) -> Response:
        if proto.finished_error is not None and session.done:
            return JSON({"error": proto.finished_error.format(id=session.id)})
        return JSON(await session.env.query(name))  # type: ignore[attr-defined]

    @app.post("/close", dependencies=guard)
    async def close(body: CloseRequest) -> Response:  # type: ignore[valid-type]
        # AgentGym answers false for any id it cannot close, issued or not.
        return JSON(await store.close(getattr(body, id_field)))

    async def _with_session(
        session_id: int, action: Callable[[Session], Awaitable[Response]]
    ) -> Response:
        try:
            session = store.get(session_id)
        except UnknownSession as unknown:
            return JSON({"error": str(unknown)})
        return await _guarded(session, lambda: action(session))

    async def _reset(session: Session, task_id: int) -> Response:
        first = await session.env.reset(task_id)
        # The wire carries the environment's own observation and reward where the agent's first
        # observation adds to it (SciWorld: the task description, and its first step's reward).
        session.observation = str(first.info.get("observation", first.text))
        session.reward, session.done = float(first.info.get("reward", 0.0)), False
        session.fields = {k: first.info.get(k) for k in proto.reset_fields if k in first.info}
        return JSON(_reset_payload(spec, session))

    async def _step(session: Session, action: str) -> Response:
        if proto.finished_error is not None and session.done:
            return JSON({"error": proto.finished_error.format(id=session.id)})
        result = await session.env.step(action)
        session.observation, session.reward, session.done = (
            result.observation,
            result.reward,
            result.done,
        )
        session.fields.update({k: result.info.get(k) for k in proto.step_info_fields})
        payload: dict[str, Any] = {
            proto.step_observation_field: result.observation,
            "reward": wire_number(result.reward, proto.float_rewards),
            **{k: session.fields[k] for k in proto.step_info_fields},
            "done": result.done,
        }
        if id_field == "env_idx":
            info = {k: result.info[k] for k in proto.step_info if k in result.info}
            payload["info"] = info or None
        return JSON(payload)

    return app


async def _const(response: Response) -> Response:
    return response


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


def _reset_payload(spec: EnvSpec, session: Session) -> Any:
    proto = spec.protocol
    if proto.reset_returns == "pair":
        return [session.observation, None]
    if proto.reset_returns == "text":
        return session.observation
    return {name: _field(proto, session, name) for name in proto.reset_fields}


def _observation(proto: WireProtocol, session: Session) -> Any:
    """`GET /observation`: the text, or AgentGym's object where the protocol has one."""
    if not proto.observation_fields:
        return session.observation
    return {name: _field(proto, session, name) for name in proto.observation_fields}


def _field(proto: WireProtocol, session: Session, name: str) -> Any:
    """A named wire field of the session: its own state, or the environment's extra."""
    own = {
        "id": session.id,
        "observation": session.observation,
        "reward": wire_number(session.reward, proto.float_rewards),
        "done": session.done,
        "deleted": False,
    }
    return own[name] if name in own else session.fields.get(name)


def _detail(proto: WireProtocol, session: Session) -> dict[str, Any]:
    return {
        "observation": session.observation,
        "done": session.done,
        "reward": wire_number(session.reward, proto.float_rewards),
        "deleted": False,
    }


def _bearer_guard(token: str) -> Callable[[Request], Awaitable[None]]:
    expected = f"Bearer {token}".encode()

    async def check(request: Request) -> None:
        given = request.headers.get("authorization", "").encode()
        if not secrets.compare_digest(given, expected):
            raise _Unauthorized()

    return check


class _Unauthorized(Exception):
    pass


async def _expire_periodically(store: SessionStore, interval_s: float) -> None:
    while True:
        await asyncio.sleep(interval_s)
        try:
            await store.expire_idle()
        except Exception:
            log.exception("expiring idle sessions failed")


async def _unauthorized(_: Request, __: Exception) -> Response:
    return JSON(
        {"error": "missing or wrong bearer token (send 'Authorization: Bearer <token>')"},
        status_code=401,
        headers={"WWW-Authenticate": "Bearer"},
    )
