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

import contextlib
import math
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from agenttrain.envs import get_spec
from agenttrain.envs.base import describe_failure
from agenttrain.integrations.verl.settings import AGENT_NAME, LoopSettings
from agenttrain.integrations.verl.workers import episode_turns
from agenttrain.rollout.turns import EpisodeTurns

try:  # verl <= 0.7: be a real subclass, so isinstance checks hold
    from verl.interactions.base import BaseInteraction as _Base  # type: ignore[import-not-found]
except ImportError:  # verl >= 0.8 or no verl: the same interface, standalone
    _Base = object

SESSION_TTL_S = 900.0


@dataclass
class _Session:
    turns: EpisodeTurns
    task_id: int
    last_used: float = field(default_factory=time.monotonic)
    closed: bool = False


_LIVE: dict[str, _Session] = {}
"""Every session of this process, whichever interaction object opened it: verl 0.7 builds a
new interaction per trajectory, so a per-object table never saw the sessions of episodes
that other trajectories abandoned (cut by `response_length`), and they leaked (issue 23)."""


def turn_score(turns: EpisodeTurns, before: float) -> float:
    """What this turn added to the episode's reward, so that verl 0.7's `turn_scores` sum to
    the episode's reward under the environment's rule (last step's or summed); NaN once the
    episode ended in an env or agent error, which `reward.compute_score` reports as an error,
    never as a score (the turn scores are all verl 0.7 hands a reward function)."""
    reward = turns.episode_reward()
    return math.nan if reward is None else reward - before


class AgentTrainInteraction(_Base):  # type: ignore[misc,valid-type]
    """One agenttrain episode per interaction instance (`instance_id` = verl's request id)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = dict(config)
        self.name: str = self.config.pop("name", AGENT_NAME)
        self.session_ttl_s = float(self.config.pop("session_ttl_s", SESSION_TTL_S))
        self.settings = LoopSettings(**self.config)
        self.sessions = _LIVE
        self._opened: set[str] = set()
        """Ids this object opened: what a finalize without an id closes."""

    async def start_interaction(self, instance_id: str | None = None, **kwargs: Any) -> str:
        """Reset an environment to the row's task (`env`, `task_id` in interaction_kwargs)."""
        await self._close_idle()
        instance_id = instance_id or uuid.uuid4().hex
        if "env" not in kwargs or "task_id" not in kwargs:
            raise ValueError(
                "agenttrain interaction: interaction_kwargs need 'env' and 'task_id' "
                "(write the data with `agenttrain data --format verl`)"
            )
        turns = await episode_turns(get_spec(str(kwargs["env"])), self.settings)
        session = _Session(turns, int(kwargs["task_id"]))
        self.sessions[instance_id] = session
        self._opened.add(instance_id)
        if await turns.reset(session.task_id) is None:
            await self._close(session)
        return instance_id

    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any
    ) -> tuple[bool, str, float, dict[str, Any]]:
        """Step the environment with the last assistant message's action."""
        session = self.sessions[instance_id]
        session.last_used = time.monotonic()
        turns = session.turns
        if turns.finish is not None:
            return True, "", turn_score(turns, 0.0), self._details(session)
        reply = next((m["content"] for m in reversed(messages) if m["role"] == "assistant"), "")
        before = turns.episode_reward() or 0.0
        try:
            result = await turns.play(str(reply))
        except Exception as failure:  # the agent's side (the parser) failed: this episode's
            turns.end("agent_error", describe_failure(failure))
            await self._close(session)
            return True, "", turn_score(turns, before), self._details(session)
        if result.finish is None and turns.out_of_turns():
            turns.end("max_turns")
        if turns.finish is not None:
            await self._close(session)
        score = turn_score(turns, before)
        return turns.finish is not None, result.observation, score, self._details(session)

    async def calculate_score(self, instance_id: str | None = None, **kwargs: Any) -> float:
        """The episode's reward (the last step's, or the sum); 0.0 for an env or agent error,
        which `_details(...)` flags so it can be excluded rather than scored."""
        session = self._one(instance_id)
        reward = session.turns.episode_reward() if session is not None else None
        return 0.0 if reward is None else float(reward)

    async def finalize_interaction(self, instance_id: str | None = None, **kwargs: Any) -> None:
        """Close the instance's session (without an id: every session this object opened)
        and forget it."""
        ids = [instance_id] if instance_id is not None else list(self._opened)
        for key in ids:
            self._opened.discard(key)
            session = self.sessions.pop(key, None)
            if session is not None:
                await self._close(session)

    # -- internals -------------------------------------------------------------------------

    def _one(self, instance_id: str | None) -> _Session | None:
        if instance_id is not None:
            return self.sessions.get(instance_id)
        return next(reversed(self.sessions.values()), None) if len(self.sessions) == 1 else None

    @staticmethod
    async def _close(session: _Session) -> None:
        if not session.closed:
            session.closed = True
            with contextlib.suppress(Exception):  # closing must not fail the episode
                await session.turns.env.close()

    async def _close_idle(self) -> None:
        """Close sessions verl abandoned (it never calls finalize_interaction)."""
        now = time.monotonic()
        for key, session in list(self.sessions.items()):
            if now - session.last_used > self.session_ttl_s:
                await self._close(session)
                del self.sessions[key]

    @staticmethod
    def _details(session: _Session) -> dict[str, Any]:
        turns = session.turns
        return {
            "agenttrain_env": turns.spec.name,
            "agenttrain_task_id": session.task_id,
            "finish_reason": turns.finish or "",
            "env_error": int(turns.finish == "env_error"),
            "agent_error": int(turns.finish == "agent_error"),
            "env_error_message": turns.error or "",
            "turn_scores": list(turns.rewards),
            "success": int(turns.succeeded()),
        }
