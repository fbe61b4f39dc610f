"""Run an environment server in this process: bind (with a clear error on a taken port), serve."""

from __future__ import annotations

import errno
import socket
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

import uvicorn

from agenttrain.serving.server import DEFAULT_MAX_SESSIONS, DEFAULT_SESSION_TTL_S, create_app

READY_PREFIX = "agenttrain-server-ready "
"""First line a server prints on stdout once bound; launchers read the URL from it."""


class PortInUse(OSError):
    pass


def http_get(url: str, timeout_s: float = 1.0) -> tuple[int, str]:
    """A plain blocking GET for probes: (status, body text); raises OSError if nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as answer:
        return answer.code, answer.read().decode(errors="replace")


def describe_listener(host: str, port: int) -> str:
    """What answers GET / on a taken port, to tell the user which server holds it."""
    try:
        status, body = http_get(f"http://{_url_host(host)}:{port}/")
    except OSError as failure:
        return f"it does not answer HTTP ({type(failure).__name__})"
    return f"it answers GET / with HTTP {status} {body[:120]!r}"


def bind(host: str, port: int) -> socket.socket:
    """A listening-ready socket on (host, port); port 0 picks a free port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as failure:
        sock.close()
        if failure.errno == errno.EADDRINUSE:
            raise PortInUse(
                f"port {port} on {host} is already in use; {describe_listener(host, port)}. "
                "Stop that server or choose another port (--port 0 picks a free one)."
            ) from None
        raise
    return sock


def _url_host(host: str) -> str:
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def serve(
    env: str,
    *,
    host: str = "127.0.0.1",
    port: int = 36001,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    session_ttl_s: float = DEFAULT_SESSION_TTL_S,
    token: str | None = None,
    log_level: str = "warning",
    access_log: bool = False,
    workers: int | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
) -> None:
    """Serve `env` until interrupted; open sessions are closed on shutdown. `workers` runs
    sessions in that many worker processes (SciWorld always uses them); every instance is
    built with `env_kwargs`."""
    app = create_app(
        env,
        max_sessions=max_sessions,
        session_ttl_s=session_ttl_s,
        token=token,
        workers=workers,
        env_kwargs=env_kwargs,
    )
    sock = bind(host, port)
    bound_port = sock.getsockname()[1]
    url = f"http://{_url_host(host)}:{bound_port}"
    print(f"{READY_PREFIX}{url}", flush=True)
    spec = app.state.spec
    print(
        f"Serving {spec.display_name} on {url} (AgentGym '{spec.protocol.id_field}' dialect; "
        f"max {max_sessions} sessions; idle sessions closed after {session_ttl_s:.0f} s; "
        f"token {'required' if token else 'off'}"
        + (f"; options {dict(env_kwargs)}" if env_kwargs else "")
        + (f"; up to {app.state.pool.size} worker processes" if app.state.pool else "")
        + "). Ctrl-C stops it.",
        file=sys.stderr,
        flush=True,
    )
    config = uvicorn.Config(
        app,
        log_level=log_level,
        access_log=access_log,
        timeout_keep_alive=75,
        backlog=4096,
        proxy_headers=False,  # loopback/LAN service; no proxy to trust by default
        date_header=False,
    )
    uvicorn.Server(config).run(sockets=[sock])
