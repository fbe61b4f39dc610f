"""Typed errors of the environment client. Each names the server URL and what it answered."""

from __future__ import annotations

from agenttrain.envs.base import EnvError


class EnvServerError(EnvError):
    """Base of every error that involves an environment server."""

    def __init__(self, url: str, message: str) -> None:
        super().__init__(f"{url}: {message}")
        self.url = url


class ServerUnreachable(EnvServerError):
    """Nothing answered (connection refused, DNS failure, reset) after the retries."""


class ServerTimeout(EnvServerError):
    """The server accepted the request but did not answer within the timeout."""


class WrongServer(EnvServerError):
    """The port answers, but it is not the environment that was asked for."""

    def __init__(self, url: str, expected: str, found: str) -> None:
        super().__init__(
            url, f"expected an environment server answering {expected!r} at GET /, found {found!r}"
        )
        self.expected = expected
        self.found = found


TOKEN_HINT = (
    " (the server was started with `agenttrain serve --token`: give the client the same token, "
    "with --token, $AGENTTRAIN_SERVER_TOKEN or env.token)"
)


class ServerRefused(EnvServerError):
    """An HTTP error status: bad token (401), wrong route (404), bad request (422), busy (503)."""

    def __init__(self, url: str, route: str, status: int, body: str) -> None:
        hint = TOKEN_HINT if status == 401 else ""
        super().__init__(url, f"{route} answered HTTP {status}: {body[:300]}{hint}")
        self.route = route
        self.status = status
        self.body = body


class ServerBusy(ServerRefused):
    """HTTP 503: the server's session cap is reached (after retrying with backoff)."""


class EnvRequestFailed(EnvServerError):
    """The server answered `{"error": ...}` (AgentGym reports failures as HTTP 200 data)."""

    def __init__(self, url: str, route: str, message: str) -> None:
        super().__init__(url, f"{route} failed: {message}")
        self.route = route
        self.server_message = message


class SessionLost(EnvRequestFailed):
    """The server no longer knows the session (it restarted, or closed it after idling)."""


class ProtocolMismatch(EnvServerError):
    """The answer does not have the shape the environment's wire protocol prescribes."""
