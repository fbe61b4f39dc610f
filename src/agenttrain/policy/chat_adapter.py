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

from agenttrain.policy.base import ChatBackend, Generation, GenerationRequest, SamplingParams

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
        conversations = [list(request.messages) for request in requests]
        answers = self._run(self.backend.chat(conversations, sampling))
        return [Generation([], [], answer.finish_reason, text=answer.text) for answer in answers]

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
