"""HTTP plumbing shared by the server's routes: orjson answers, the body limit, the token guard.

Every refusal of ours is JSON `{"error": ...}`, including the ones made before a route runs
(413 for a large body, 401 for a wrong token).
"""

import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from fastapi import Request
from fastapi.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send


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


class Unauthorized(Exception):
    """The request lacks the server's bearer token; answered by `unauthorized`."""


def bearer_guard(token: str) -> Callable[[Request], Awaitable[None]]:
    """A route dependency that raises `Unauthorized` unless `Authorization: Bearer <token>`."""
    expected = f"Bearer {token}".encode()

    async def check(request: Request) -> None:
        given = request.headers.get("authorization", "").encode()
        if not secrets.compare_digest(given, expected):
            raise Unauthorized()

    return check


async def unauthorized(_: Request, __: Exception) -> Response:
    return JSON(
        {"error": "missing or wrong bearer token (send 'Authorization: Bearer <token>')"},
        status_code=401,
        headers={"WWW-Authenticate": "Bearer"},
    )
