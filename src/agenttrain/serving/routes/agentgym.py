"""AgentGym's dialects, read from the environment's `WireProtocol`: the request fields, the
shape of each answer, the refusal once an episode ended, and the extra `GET /<query>` routes.

No `from __future__ import annotations` in the route modules: FastAPI reads the handlers'
annotations, which name values of the enclosing function (the protocol's id field, the
request models made at run time).
"""

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, create_model

from agenttrain.envs.base import StepResult, WireProtocol
from agenttrain.serving.http import JSON
from agenttrain.serving.sessions import Session

WithSession = Callable[[int, Callable[[Session], Awaitable[Response]]], Awaitable[Response]]
"""Runs an action on the live session of an id (or answers AgentGym's unknown-id error)."""


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


def request_models(proto: WireProtocol) -> tuple[type[BaseModel], ...]:
    """The bodies of `/reset`, `/step` and `/close`, with the protocol's id and task fields."""
    id_field = proto.id_field
    task_default = ... if proto.task_required else 0  # AgentGym's 422, or its default
    return (
        _request_model(
            "ResetRequest", {id_field: (int, ...), proto.task_field: (int, task_default)}
        ),
        _request_model("StepRequest", {id_field: (int, ...), "action": (str, ...)}),
        _request_model("CloseRequest", {id_field: (int, ...)}),
    )


def _request_model(name: str, fields: dict[str, Any]) -> type[BaseModel]:
    # Extra keys are ignored, as in AgentGym (its TextCraft client sends `minecraft_dir`).
    return create_model(name, __config__=ConfigDict(extra="ignore"), **fields)


def finished_refusal(proto: WireProtocol, session: Session) -> Response | None:
    """AgentGym's answer to a step or query once the episode ended, where it refuses them."""
    if proto.finished_error is not None and session.done:
        return JSON({"error": proto.finished_error.format(id=session.id)})
    return None


def reset_payload(proto: WireProtocol, session: Session) -> Any:
    if proto.reset_returns == "pair":
        return [session.observation, None]
    if proto.reset_returns == "text":
        return session.observation
    return {name: _field(proto, session, name) for name in proto.reset_fields}


def step_payload(proto: WireProtocol, session: Session, result: StepResult) -> dict[str, Any]:
    payload: dict[str, Any] = {
        proto.step_observation_field: result.observation,
        "reward": wire_number(result.reward, proto.float_rewards),
        **{k: session.fields[k] for k in proto.step_info_fields},
        "done": result.done,
    }
    if proto.id_field == "env_idx":
        info = {k: result.info[k] for k in proto.step_info if k in result.info}
        payload["info"] = info or None
    return payload


def observation_payload(proto: WireProtocol, session: Session) -> Any:
    """`GET /observation`: the text, or AgentGym's object where the protocol has one."""
    if not proto.observation_fields:
        return session.observation
    return {name: _field(proto, session, name) for name in proto.observation_fields}


def detail_payload(proto: WireProtocol, session: Session) -> dict[str, Any]:
    return {
        "observation": session.observation,
        "done": session.done,
        "reward": wire_number(session.reward, proto.float_rewards),
        "deleted": False,
    }


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


def query_routes(proto: WireProtocol, with_session: WithSession, guard: list[Any]) -> APIRouter:
    """`GET /<name>?<id>=` for each of the protocol's queries (SciWorld's `action_hint`...),
    answered by the environment's `query(name)`."""
    router = APIRouter()

    def route(name: str) -> Callable[[int], Awaitable[Response]]:
        async def answer(session_id: Annotated[int, Query(alias=proto.id_field)]) -> Response:
            return await with_session(session_id, lambda s: _query(proto, s, name))

        return answer

    for name in proto.queries:
        router.add_api_route(f"/{name}", route(name), methods=["GET"], dependencies=guard)
    return router


async def _query(proto: WireProtocol, session: Session, name: str) -> Response:
    refusal = finished_refusal(proto, session)
    if refusal is not None:
        return refusal
    return JSON(await session.env.query(name))  # type: ignore[attr-defined]
