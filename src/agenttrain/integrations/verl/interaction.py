"""agenttrain environments as a verl interaction, for verl <= 0.7 (verl 0.8 removed
`BaseInteraction`; newer verl uses the agent loop in `agent_loop.py`).

verl 0.7's `ToolAgentLoop` calls `start_interaction(request_id, **interaction_kwargs)`, then
after every model reply without a tool call `generate_response(request_id, messages,
**interaction_kwargs)` -> (terminate, observation, turn score, extra), and appends the
observation as a user turn. The dataset's prompt must therefore already hold the task's first
observation (`agenttrain data --format verl --first-observation`); `start_interaction` resets
the environment to the same task.

Sessions are always closed: when the episode ends (done, turn limit, too many format errors,
an env error) inside `generate_response`; by `finalize_interaction` (with or without an id:
verl 0.7's base class declares it without one); and, since verl 0.7 never calls
`finalize_interaction`, episodes abandoned mid-way (cut by `response_length`) are closed once
they sit idle for `session_ttl_s`, checked whenever an interaction starts.

Configured with verl's interaction YAML:

    interaction:
      - name: agenttrain
        class_name: agenttrain.integrations.verl.interaction.AgentTrainInteraction
        config: {servers: {textcraft: ["http://127.0.0.1:36001"]}, max_turns: 20}
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from agenttrain.agent.formats import ActionFormat, get_format
from agenttrain.envs import EnvSpec, get_spec
from agenttrain.envs.base import Environment, describe_failure
from agenttrain.integrations.verl.settings import AGENT_NAME, LoopSettings
from agenttrain.integrations.verl.workers import environment_source

try:  # verl <= 0.7: be a real subclass, so isinstance checks hold
    from verl.interactions.base import BaseInteraction as _Base  # type: ignore[import-not-found]
except ImportError:  # verl >= 0.8 or no verl: the same interface, standalone
    _Base = object

SESSION_TTL_S = 900.0


@dataclass
class _Session:
    spec: EnvSpec
    format: ActionFormat
    env: Environment
    task_id: int
    turn_scores: list[float] = field(default_factory=list)
    turns: int = 0
    consecutive_format_errors: int = 0
    finish_reason: str | None = None
    error: str | None = None
    last_used: float = field(default_factory=time.monotonic)
    closed: bool = False


class AgentTrainInteraction(_Base):  # type: ignore[misc,valid-type]
    """One agenttrain episode per interaction instance (`instance_id` = verl's request id)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = dict(config)
        self.name: str = self.config.pop("name", AGENT_NAME)
        self.session_ttl_s = float(self.config.pop("session_ttl_s", SESSION_TTL_S))
        self.settings = LoopSettings(**self.config)
        self.sessions: dict[str, _Session] = {}

    async def start_interaction(self, instance_id: str | None = None, **kwargs: Any) -> str:
        """Reset an environment to the row's task (`env`, `task_id` in interaction_kwargs)."""
        await self._close_idle()
        instance_id = instance_id or uuid.uuid4().hex
        if "env" not in kwargs or "task_id" not in kwargs:
            raise ValueError(
                "agenttrain interaction: interaction_kwargs need 'env' and 'task_id' "
                "(write the data with `agenttrain data --format verl`)"
            )
        spec = get_spec(str(kwargs["env"]))
        source = await environment_source(spec.name, self.settings)
        action_format = get_format(self.settings.action_format, spec)
        session = _Session(spec, action_format, source.environment(), int(kwargs["task_id"]))
        self.sessions[instance_id] = session
        try:
            await asyncio.wait_for(session.env.reset(session.task_id), self.settings.env_timeout_s)
        except Exception as failure:
            await self._end(session, "env_error", failure)
        return instance_id

    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any
    ) -> tuple[bool, str, float, dict[str, Any]]:
        """Step the environment with the last assistant message's action."""
        session = self.sessions[instance_id]
        session.last_used = time.monotonic()
        if session.finish_reason is not None:
            return True, "", 0.0, self._details(session)
        reply = next((m["content"] for m in reversed(messages) if m["role"] == "assistant"), "")
        session.turns += 1
        parsed = session.format.parse(str(reply))
        if parsed.action is None:
            session.consecutive_format_errors += parsed.format_error
            session.turn_scores.append(0.0)
            if session.consecutive_format_errors >= self.settings.max_format_errors:
                await self._end(session, "format_error")
            elif session.turns >= self._turn_limit(session):
                await self._end(session, "max_turns")
            done = session.finish_reason is not None
            return done, parsed.feedback or "", 0.0, self._details(session)
        session.consecutive_format_errors = 0
        try:
            result = await asyncio.wait_for(
                session.env.step(parsed.action), self.settings.env_timeout_s
            )
        except Exception as failure:
            await self._end(session, "env_error", failure)
            return True, "", 0.0, self._details(session)
        session.turn_scores.append(float(result.reward))
        if result.done:
            await self._end(session, "done")
        elif session.turns >= self._turn_limit(session):
            await self._end(session, "max_turns")
        terminate = session.finish_reason is not None
        return terminate, result.observation, float(result.reward), self._details(session)

    async def calculate_score(self, instance_id: str | None = None, **kwargs: Any) -> float:
        """The episode's reward (the last step's, or the sum); 0.0 for an env error, which
        `_details(...)["env_error"]` flags so it can be excluded rather than scored."""
        session = self._one(instance_id)
        if session is None or session.finish_reason == "env_error" or not session.turn_scores:
            return 0.0
        if (self.settings.reward or session.spec.episode_reward) == "sum":
            return sum(session.turn_scores)
        return session.turn_scores[-1]

    async def finalize_interaction(self, instance_id: str | None = None, **kwargs: Any) -> None:
        """Close the instance's session (all sessions when no id is given) and forget it."""
        ids = [instance_id] if instance_id is not None else list(self.sessions)
        for key in ids:
            session = self.sessions.pop(key, None)
            if session is not None:
                await self._close(session)

    # -- internals -------------------------------------------------------------------------

    def _turn_limit(self, session: _Session) -> int:
        return self.settings.max_turns or session.spec.default_max_turns

    def _one(self, instance_id: str | None) -> _Session | None:
        if instance_id is not None:
            return self.sessions.get(instance_id)
        return next(reversed(self.sessions.values()), None) if len(self.sessions) == 1 else None

    async def _end(self, session: _Session, reason: str, failure: Exception | None = None) -> None:
        session.finish_reason = reason
        if failure is not None:
            session.error = describe_failure(failure)
        await self._close(session)

    @staticmethod
    async def _close(session: _Session) -> None:
        if not session.closed:
            session.closed = True
            with contextlib.suppress(Exception):  # closing must not fail the episode
                await session.env.close()

    async def _close_idle(self) -> None:
        """Close sessions verl abandoned (it never calls finalize_interaction)."""
        now = time.monotonic()
        for key, session in list(self.sessions.items()):
            if now - session.last_used > self.session_ttl_s:
                await self._close(session)
                del self.sessions[key]

    @staticmethod
    def _details(session: _Session) -> dict[str, Any]:
        reward = session.turn_scores[-1] if session.turn_scores else 0.0
        return {
            "agenttrain_env": session.spec.name,
            "agenttrain_task_id": session.task_id,
            "finish_reason": session.finish_reason or "",
            "env_error": int(session.finish_reason == "env_error"),
            "env_error_message": session.error or "",
            "turn_scores": list(session.turn_scores),
            "success": int(
                session.finish_reason == "done" and reward >= session.spec.success_reward
            ),
        }
