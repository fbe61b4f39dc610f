"""Live environment sessions of a server: ids, a cap, idle expiry, and no leaks.

All methods run on the server's event loop, so the bookkeeping needs no thread locks;
each session has an asyncio lock so that requests to one session run one at a time even
when its environment steps in a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agenttrain.envs.base import Environment

log = logging.getLogger(__name__)


class SessionCapReached(Exception):
    """Creating one more session would exceed the server's `max_sessions`."""


class UnknownSession(Exception):
    """The id names no live session; the message is AgentGym's wording."""


@dataclass
class Session:
    id: int
    env: Environment
    last_used: float
    observation: str = ""
    reward: float = 0.0
    done: bool = False
    fields: dict[str, Any] = field(default_factory=dict)
    """The environment's extra wire fields of the last answer (BabyAI's `score`)."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class SessionStore:
    def __init__(
        self,
        factory: Callable[[], Environment],
        max_sessions: int,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._factory = factory
        self.max_sessions = max_sessions
        self.ttl_s = ttl_s
        self._clock = clock
        self._sessions: dict[int, Session] = {}
        self._next_id = 0
        self.created_total = 0
        self.closed_total = 0
        self.expired_total = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def create(self) -> Session:
        if len(self._sessions) >= self.max_sessions:
            raise SessionCapReached(
                f"session cap reached: {len(self._sessions)} of {self.max_sessions} sessions are "
                "live; close finished sessions, or restart the server with a larger --max-sessions"
            )
        session = Session(self._next_id, self._factory(), self._clock())
        self._sessions[session.id] = session
        self._next_id += 1  # ids are never reused, so a stale id cannot reach a new episode
        self.created_total += 1
        return session

    def get(self, session_id: int) -> Session:
        session = self._sessions.get(session_id)
        if session is None:
            if 0 <= session_id < self._next_id:
                raise UnknownSession(f"The task with environment {session_id} has been deleted.")
            raise UnknownSession(f"The id {session_id} is not valid.")
        session.last_used = self._clock()
        return session

    async def close(self, session_id: int) -> bool:
        """Close a live session; False for any other id, closed or never issued (as AgentGym)."""
        session = self._sessions.pop(session_id, None)
        if session is None:
            return False
        self.closed_total += 1
        await self._close_env(session)
        return True

    async def expire_idle(self) -> int:
        """Close sessions idle for longer than the TTL; returns how many were closed."""
        deadline = self._clock() - self.ttl_s
        idle = [
            s for s in self._sessions.values() if s.last_used < deadline and not s.lock.locked()
        ]
        for session in idle:
            del self._sessions[session.id]
            await self._close_env(session)
        if idle:
            self.expired_total += len(idle)
            log.info("closed %d sessions idle for more than %.0f s", len(idle), self.ttl_s)
        return len(idle)

    async def close_all(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            await self._close_env(session)

    @staticmethod
    async def _close_env(session: Session) -> None:
        try:
            await session.env.close()
        except Exception:  # a failing close must not keep the session (or the server) alive
            log.exception("closing session %d failed", session.id)
