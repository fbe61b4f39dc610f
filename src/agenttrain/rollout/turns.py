"""The turn logic of an episode, in one place: parse the model's reply, step the environment
under a timeout, count format errors, and say whether and why the episode ends.

Three callers play episodes: the rollout engine, verl's agent loop and verl's interaction.
Each keeps its own token bookkeeping (ids, masks, log-probs, context limits) and asks an
`EpisodeTurns` for everything else, so an action format, a finish reason or a reward rule
is added or changed here only.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from agenttrain.agent.formats import ActionFormat
from agenttrain.envs.base import Environment, EnvSpec, Observation, describe_failure
from agenttrain.rollout.trajectory import FinishReason


@dataclass(frozen=True)
class TurnRules:
    """The limits and rules every caller applies the same way."""

    timeout_s: float
    max_format_errors: int
    turn_limit: int
    reward: str | None = None
    """"last" or "sum" of the step rewards; None: the environment's rule."""


@dataclass(frozen=True)
class TurnResult:
    """What one model turn did."""

    reply: str
    action: str | None
    """What was sent to the environment; None when the turn did not step it."""
    observation: str
    """What the model sees next: the environment's answer, or the format's feedback."""
    reward: float
    done: bool
    format_error: bool
    finish: FinishReason | None
    """Why the episode ends with this turn (done, format_error, env_error, max_turns);
    None: it goes on."""


@dataclass
class EpisodeTurns:
    """One episode's turn state: turns played, consecutive format errors, step rewards."""

    spec: EnvSpec
    format: ActionFormat
    env: Environment
    rules: TurnRules
    turns: int = 0
    rewards: list[float] = field(default_factory=list)
    """Each turn's reward (0 for a turn that did not step the environment)."""
    step_rewards: list[float] = field(default_factory=list)
    """The environment's rewards, one per step: what the episode reward is computed from."""
    consecutive_format_errors: int = 0
    format_errors: int = 0
    finish: FinishReason | None = None
    error: str | None = None
    """The failure's message, for env_error (and agent_error, when a caller records one)."""
    env_s: float = 0.0
    """Seconds spent waiting for the environment."""

    async def reset(self, task_id: int) -> Observation | None:
        """The first observation; None when the environment failed (finish: env_error)."""
        return await self._call(self.env.reset(task_id))

    async def play(self, reply: str) -> TurnResult:
        """Parse `reply`, step the environment with its action, and update the state."""
        self.turns += 1
        parsed = self.format.parse(reply)
        if parsed.action is None:
            self.format_errors += parsed.format_error
            self.consecutive_format_errors = (
                self.consecutive_format_errors + 1 if parsed.format_error else 0
            )
            self.rewards.append(0.0)
            if self.consecutive_format_errors >= self.rules.max_format_errors:
                self.finish = "format_error"
            return self._result(reply, None, parsed.feedback or "", 0.0, False, parsed.format_error)
        self.consecutive_format_errors = 0
        stepped = await self._call(self.env.step(parsed.action))
        if stepped is None:
            return self._result(reply, parsed.action, "", 0.0, True, False)
        self.rewards.append(float(stepped.reward))
        self.step_rewards.append(float(stepped.reward))
        if stepped.done:
            self.finish = "done"
        return self._result(
            reply, parsed.action, stepped.observation, float(stepped.reward), stepped.done, False
        )

    def out_of_turns(self) -> bool:
        """The turn limit is reached (callers decide when to look: before asking the model,
        or right after a turn)."""
        return self.turns >= self.rules.turn_limit

    def end(self, reason: FinishReason, error: str | None = None) -> None:
        """End the episode for a reason the caller found (context limit, max_turns, ...)."""
        self.finish = reason
        self.error = error if error is not None else self.error

    @property
    def errored(self) -> bool:
        return self.finish in ("env_error", "agent_error")

    def episode_reward(self) -> float | None:
        """The environment's step rewards by the rule (the last step's, as AgentGym reports
        it, or their sum); turns that did not step count for nothing. None after an error:
        never a score."""
        if self.errored:
            return None
        if (self.rules.reward or self.spec.episode_reward) == "sum":
            return sum(self.step_rewards)
        return self.step_rewards[-1] if self.step_rewards else 0.0

    def succeeded(self) -> bool:
        reward = self.episode_reward()
        return self.finish == "done" and reward is not None and reward >= self.spec.success_reward

    async def _call(self, call: Any) -> Any:
        """An environment call under the timeout; a failure ends the episode as env_error."""
        started = time.perf_counter()
        try:
            return await asyncio.wait_for(call, self.rules.timeout_s)
        except Exception as failure:  # any environment failure is classified, never scored
            self.end("env_error", describe_failure(failure))
            return None
        finally:
            self.env_s += time.perf_counter() - started

    def _result(
        self,
        reply: str,
        action: str | None,
        observation: str,
        reward: float,
        done: bool,
        format_error: bool,
    ) -> TurnResult:
        return TurnResult(reply, action, observation, reward, done, format_error, self.finish)
