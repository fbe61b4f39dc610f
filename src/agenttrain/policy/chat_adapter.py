"""Text-only backends (an OpenAI-compatible chat API, an oracle) behind `Policy.generate`.

The engine calls `generate` from a worker thread; a chat backend is async (it may hold an
HTTP session bound to one event loop), so the adapter runs it on an event loop of its own,
in a thread of its own, for its whole life.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from agenttrain.policy.base import (
    ChatBackend,
    Generation,
    GenerationRequest,
    PolicyError,
    SamplingParams,
)

T = TypeVar("T")


class ChatPolicyAdapter:
    """A `Policy` that answers each request from its `messages` with a chat backend."""

    template = None
    tokenizer = None
    max_context = 1 << 30
    """No local token budget: the remote side enforces its own context limit."""

    def __init__(self, backend: ChatBackend) -> None:
        self.backend = backend
        self.name = backend.name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def generate(
        self, requests: Sequence[GenerationRequest], sampling: SamplingParams
    ) -> list[Generation]:
        """Each conversation on its own: one that fails (a solver that raises) comes back with
        `error` set, and the others are answered. A `PolicyError` (the backend itself is
        unusable: an unreachable or refusing endpoint) ends the call, as it would every
        episode after it."""
        return self._run(self._answer_each([list(r.messages) for r in requests], sampling))

    async def _answer_each(
        self, conversations: list[list[Any]], sampling: SamplingParams
    ) -> list[Generation]:
        answers = await asyncio.gather(
            *(self.backend.chat([conversation], sampling) for conversation in conversations),
            return_exceptions=True,
        )
        generations = []
        for answer in answers:
            if isinstance(answer, BaseException):
                if isinstance(answer, PolicyError) or not isinstance(answer, Exception):
                    raise answer  # not this episode's failure: the run's (or a cancellation)
                error = f"{type(answer).__name__}: {answer}".removesuffix(": ")
                generations.append(Generation([], [], "stop", error=error))
            else:
                generations.append(Generation([], [], answer[0].finish_reason, text=answer[0].text))
        return generations

    def release(self, key: str) -> None:
        """Nothing is cached per episode."""

    async def aclose(self) -> None:
        """Close the backend (e.g. its HTTP session) on its own loop, then stop that loop."""
        if self._loop is None:
            return
        closer = getattr(self.backend, "aclose", None)
        if closer is not None:
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(closer(), self._loop))
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
        self._loop.close()
        self._loop, self._thread = None, None

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=self._loop.run_forever, name=f"chat-{self.name}", daemon=True
                )
                self._thread.start()
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()
