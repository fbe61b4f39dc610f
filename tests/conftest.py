"""Shared fixtures: real `agenttrain serve` processes on loopback."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from agenttrain.serving.launch import ServerProcess, start_server


@pytest.fixture(scope="session")
def textcraft_url() -> Iterator[str]:
    """One `agenttrain serve textcraft` process shared by the read-mostly tests."""
    server = start_server("textcraft", extra_args=["--max-sessions", "4096"])
    yield server.url
    server.stop()


@pytest.fixture
def start_textcraft() -> Iterator[Callable[..., ServerProcess]]:
    """Start extra TextCraft servers with custom flags; all stopped after the test."""
    started: list[ServerProcess] = []

    def start(*args: str) -> ServerProcess:
        server = start_server("textcraft", extra_args=list(args))
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
