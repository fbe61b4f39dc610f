"""The rollout engine: many multi-turn episodes in flight, one batched generation at a time.

Each episode is a coroutine: reset, then model turn / environment turn until done or a
limit. Environment calls run concurrently, each under a timeout. Whenever episodes need a
model turn they queue a request; a single batcher hands all queued requests to the policy
in one call (in a worker thread, so environment traffic goes on meanwhile), waiting a few
milliseconds for episodes whose environment answer is about to arrive.

Episodes are token-in-token-out: sampled tokens are appended exactly as sampled; each
environment answer is appended as the chat template's delta for one user message. An
environment failure ends the episode as `env_error` with no reward (never a silent 0); any
other exception while playing it (a solver's, the action parser's, the policy's) ends it as
`agent_error`, with the message kept: one episode's failure never ends the run. Only a
`PolicyError` (the policy itself is unusable, e.g. an unreachable endpoint) ends it.

An episode asked to play with experience (`EpisodeRequest.with_experience`) gets the pool's
answer for its task goal in a marked block in its first user turn; when it ends, that block
is taken out of its messages and `prompt_ids`, so training sees the prompt without it
(AgentEvolver's "discard" mode) and `Trajectory.experience` keeps what was shown.

An episode with an oracle start (`EpisodeRequest.oracle_share`) begins where the environment's
oracle has played part of its plan: the oracle's turns open the conversation, in the prompt.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from agenttrain.agent.conversation import conversation_start
from agenttrain.agent.experts import OracleExpert
from agenttrain.agent.formats import ActionFormat, get_format
from agenttrain.envs.base import Environment, EnvSpec, describe_failure
from agenttrain.memory.experience import observation_after_block, with_experience
from agenttrain.policy.base import (
    ChatMessage,
    Generation,
    GenerationRequest,
    Policy,
    PolicyError,
    SamplingParams,
    StreamingPolicy,
)
from agenttrain.rollout.trajectory import FinishReason, Trajectory, Turn
from agenttrain.rollout.turns import EpisodeTurns, TurnRules


class RolloutConfig(BaseModel):
    """Limits and behaviour of episodes (shared by `eval`, `train` and `demos`)."""

    model_config = ConfigDict(extra="forbid")

    max_turns: int | None = Field(None, ge=1, description="default: the environment's")
    max_new_tokens: int = Field(256, ge=1, description="per model turn")
    max_context: int = Field(4096, ge=64, description="prompt + response tokens per episode")
    action_format: Literal["react", "adapt", "json", "raw"] = "react"
    prompt_style: Literal["agenttrain", "agentgym"] = "agenttrain"
    system_prompt: str | None = None
    env_timeout_s: float = Field(60.0, gt=0, description="per environment call")
    max_format_errors: int = Field(3, ge=1, description="consecutive, before giving up")
    reward: Literal["last", "sum"] | None = Field(
        None, description="episode reward from step rewards; default: the environment's rule"
    )
    max_in_flight: int = Field(32, ge=1, description="episodes played at once")
    batch_wait_s: float = Field(0.02, ge=0, description="wait for stragglers before generating")

    def turn_limit(self, spec: EnvSpec) -> int:
        """The turn limit of an episode that sets none: this config's, else the environment's.
        The one place the default is resolved."""
        return self.max_turns or spec.default_max_turns


@dataclass(frozen=True)
class EpisodeRequest:
    task_id: int
    group_id: str
    sample: int = 0
    seed: int = 0
    max_turns: int | None = None
    """This episode's turn limit (e.g. a curriculum's); None: `RolloutConfig.turn_limit`."""
    with_experience: bool = False
    """Inject retrieved experience into the first user turn (needs the engine's `experience`)."""
    oracle_share: float = 0.0
    """Start part-way along the oracle's solution (a reverse curriculum, as in R3): the oracle
    plays this share of its plan first, at least one step short of the end. Its turns are the
    conversation the model continues; they go into `prompt_ids`, so nothing trains on them."""


class ExperienceSource(Protocol):
    def __call__(self, goal: str) -> Awaitable[str]:
        """The experience text for a task goal; "" when there is none."""
        ...


class AgentFailure(Exception):
    """The policy answered this episode's request with an error (e.g. its solver raised)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _conversation(trajectory: Trajectory) -> list[ChatMessage]:
    """The episode's messages as a policy or oracle reads them."""
    return [ChatMessage(m["role"], m["content"]) for m in trajectory.messages]


def derive_seed(*parts: Any) -> int:
    """A stable 63-bit seed from any parts (independent of PYTHONHASHSEED)."""
    digest = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


_Queued = tuple[GenerationRequest, "asyncio.Future[Generation]"]


class _Arrivals:
    """The engine's request queue as a `RequestStream`, read from the policy's thread;
    results go back to the event loop's thread."""

    def __init__(
        self,
        take: Callable[[int], list[_Queued]],
        loop: asyncio.AbstractEventLoop,
        await_request: Callable[[asyncio.AbstractEventLoop], None] | None = None,
    ) -> None:
        self._take = take
        self._loop = loop
        self._await_request = await_request
        self._open: set[asyncio.Future[Generation]] = set()
        self._lock = threading.Lock()

    def take(self, limit: int, idle: bool = False) -> list[_Queued]:
        if idle and self._await_request is not None:
            self._await_request(self._loop)
        taken = self._take(limit)
        with self._lock:
            self._open.update(future for _, future in taken)
        return taken

    def deliver(self, handle: asyncio.Future[Generation], generation: Generation) -> None:
        with self._lock:
            self._open.discard(handle)
        # After Ctrl-C the loop may be closed while rows still decode: nobody waits for them.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(_settle, handle, generation)

    def fail(self, failure: Exception, queued: Sequence[_Queued] = ()) -> None:
        """The stream raised: every request it took and did not finish fails with it, and
        the `queued` ones it never took."""
        with self._lock:
            unfinished, self._open = self._open, set()
        for future in [*unfinished, *(future for _, future in queued)]:
            if not future.done():
                future.set_exception(failure)


def _settle(future: asyncio.Future[Generation], generation: Generation) -> None:
    if not future.done():  # its episode may have been cancelled meanwhile
        future.set_result(generation)


class RolloutEngine:
    def __init__(
        self,
        policy: Policy,
        spec: EnvSpec,
        env_factory: Callable[[], Environment],
        config: RolloutConfig,
        sampling: SamplingParams,
        on_episode: Callable[[Trajectory], None] | None = None,
        experience: ExperienceSource | None = None,
    ) -> None:
        self.policy = policy
        self.spec = spec
        self.env_factory = env_factory
        self.config = config
        self.sampling = sampling
        self.on_episode = on_episode
        self.experience = experience
        self.format: ActionFormat = get_format(config.action_format, spec.name)
        self.max_turns = config.turn_limit(spec)
        self.template = policy.template
        """None for text-only backends: their episodes carry text, no token ids."""
        self.start = conversation_start(spec, self.format, config.prompt_style)
        self.stats = {"generate_s": 0.0, "generate_calls": 0, "env_s": 0.0, "generated_tokens": 0}
        self._queue: list[_Queued] = []
        self._queue_lock = threading.Lock()
        self._arrived = threading.Condition(self._queue_lock)
        """Notified when a request is queued or an episode ends (see `_await_request`)."""
        self._wakeup: asyncio.Event | None = None
        self._live = 0
        self._oracle: OracleExpert | None = None
        """Plays the first turns of oracle starts (`EpisodeRequest.oracle_share`)."""

    async def run(self, requests: Sequence[EpisodeRequest]) -> list[Trajectory]:
        """Play every requested episode; results in request order."""
        if self.experience is None and any(r.with_experience for r in requests):
            raise ValueError("episodes asked for experience, but the engine has no source")
        self._wakeup = asyncio.Event()
        slots = asyncio.Semaphore(self.config.max_in_flight)
        batcher = asyncio.create_task(self._batcher())

        async def play(request: EpisodeRequest) -> Trajectory:
            async with slots:
                self._live += 1
                try:
                    trajectory = await self._episode(request)
                finally:
                    with self._arrived:
                        self._live -= 1
                        self._arrived.notify_all()
                    self._wakeup.set()
            if self.on_episode is not None:
                self.on_episode(trajectory)
            return trajectory

        try:
            return list(await asyncio.gather(*(play(r) for r in requests)))
        finally:
            batcher.cancel()

    # -- one episode -------------------------------------------------------------------

    async def _episode(self, request: EpisodeRequest) -> Trajectory:
        trajectory = Trajectory(
            episode_id=uuid.uuid4().hex[:12],
            env=self.spec.name,
            task_id=request.task_id,
            group_id=request.group_id,
            sample=request.sample,
            seed=request.seed,
            model=self.policy.name,
            messages=[dict(m) for m in self.start],
        )
        started = time.perf_counter()
        env = self.env_factory()
        try:
            await self._play(env, request, trajectory)
        except PolicyError:  # the policy itself is unusable: every episode would fail alike
            raise
        except Exception as failure:  # the agent's side failed: this episode's error only
            message = failure.message if isinstance(failure, AgentFailure) else None
            self._fail(trajectory, "agent_error", message or describe_failure(failure))
        finally:
            self._strip_experience(trajectory)
            await self._close(env)
            self.policy.release(trajectory.episode_id)
            trajectory.timing["episode_s"] = round(time.perf_counter() - started, 3)
        return trajectory

    async def _play(
        self, env: Environment, request: EpisodeRequest, trajectory: Trajectory
    ) -> None:
        rules = TurnRules(
            self.config.env_timeout_s,
            self.config.max_format_errors,
            request.max_turns or self.max_turns,
            self.config.reward,
        )
        turns = EpisodeTurns(self.spec, self.format, env, rules)
        try:
            await self._play_turns(turns, request, trajectory)
        finally:
            self.stats["env_s"] += turns.env_s
        trajectory.finish_reason = turns.finish
        trajectory.reward = turns.episode_reward()
        trajectory.success = turns.succeeded()
        trajectory.error = turns.error

    async def _play_turns(
        self, turns: EpisodeTurns, request: EpisodeRequest, trajectory: Trajectory
    ) -> None:
        """The episode's turns; the token bookkeeping is here, the turn logic in `turns`."""
        first = await turns.reset(request.task_id)
        if first is None:
            return
        described = self.spec.describe(first.text) if self.spec.describe else {}
        trajectory.task_info = {**described, **first.info}
        content = first.text
        if request.with_experience:
            assert self.experience is not None
            answer = await self.experience(str(described.get("goal") or first.text))
            if answer:
                trajectory.experience = answer
                content = with_experience(first.text, answer)
        trajectory.messages.append({"role": "user", "content": content})
        if request.oracle_share > 0 and not await self._play_oracle_start(
            turns, request.oracle_share, trajectory
        ):
            return
        if self.template is not None:
            trajectory.prompt_ids = self.template.prompt_ids(trajectory.messages)
        while True:
            if turns.out_of_turns():
                return turns.end("max_turns")
            start = len(trajectory.response_ids)
            reply, new_tokens, cut_off = await self._model_turn(trajectory)
            span = (start, start + new_tokens) if self.template is not None else None
            if reply is None:
                return turns.end("context_limit")
            trajectory.messages.append({"role": "assistant", "content": reply})
            result = await turns.play(reply)
            if result.finish == "env_error":
                return
            trajectory.turns.append(
                Turn(
                    reply,
                    result.action,
                    result.observation,
                    result.reward,
                    result.done,
                    result.format_error,
                    new_tokens,
                    cut_off,
                    span,
                )
            )
            if result.finish is not None:
                return
            if self.template is not None:
                delta = self.template.user_turn_ids(result.observation)
                if self._room(trajectory) - len(delta) < 2:  # no room for another model turn
                    return turns.end("context_limit")
                self._append(trajectory, delta, None)
            trajectory.messages.append({"role": "user", "content": result.observation})

    async def _play_oracle_start(
        self, turns: EpisodeTurns, share: float, trajectory: Trajectory
    ) -> bool:
        """Let the oracle play `share` of its plan (never all of it); False when the episode
        ended meanwhile (an environment failure, or a closed-loop oracle finishing early)."""
        if self._oracle is None:
            self._oracle = OracleExpert(self.spec, self.format)
        try:
            length = self._oracle.plan_length(_conversation(trajectory))
        except PolicyError as problem:  # this episode's observation, not the policy, is at fault
            raise AgentFailure(f"oracle start: {problem}") from None
        steps = min(int(share * length), length - 1, turns.rules.turn_limit - 1)
        for _ in range(steps):
            planned = self._oracle.next_step(_conversation(trajectory))
            reply = self.format.render(planned.thought, planned.action)
            result = await turns.play(reply)
            trajectory.messages.append({"role": "assistant", "content": reply})
            if result.finish == "env_error":
                return False
            trajectory.turns.append(
                Turn(reply, result.action, result.observation, result.reward, result.done)
            )
            trajectory.oracle_turns += 1
            if result.finish is not None:
                return False
            trajectory.messages.append({"role": "user", "content": result.observation})
        return True

    def _strip_experience(self, trajectory: Trajectory) -> None:
        """Put the first observation back without the experience block, and rebuild the prompt
        ids from it: the training sequence is the prompt without the block + the response."""
        if trajectory.experience is None:
            return
        index = len(self.start)
        shown = trajectory.messages[index]["content"]
        trajectory.messages[index] = {"role": "user", "content": observation_after_block(shown)}
        if self.template is not None:
            prompt_end = index + 1 + 2 * trajectory.oracle_turns  # the oracle's turns are prompt
            trajectory.prompt_ids = self.template.prompt_ids(trajectory.messages[:prompt_end])

    async def _model_turn(self, trajectory: Trajectory) -> tuple[str | None, int, bool]:
        """The model's reply (None when the context is full), its new token count, and
        whether it was cut off by the token limit."""
        conversation = _conversation(trajectory)
        prompt_ids: list[int] = []
        max_new_tokens = min(self.sampling.max_new_tokens, self.config.max_new_tokens)
        if self.template is not None:
            budget = self._room(trajectory)
            if budget < 2:
                return None, 0, False
            prompt_ids = trajectory.prompt_ids + trajectory.response_ids
            max_new_tokens = min(max_new_tokens, budget - 1)
        request = GenerationRequest(
            prompt_ids=prompt_ids,
            key=trajectory.episode_id,
            max_new_tokens=max_new_tokens,
            seed=derive_seed(
                trajectory.seed, trajectory.task_id, trajectory.sample, trajectory.num_turns
            ),
            messages=conversation,
        )
        generation = await self._generate(request)
        if generation.error is not None:
            raise AgentFailure(generation.error)
        cut_off = generation.finish_reason == "length"
        if self.template is None:
            return generation.text or "", 0, cut_off
        self._append(trajectory, generation.token_ids, generation.logprobs)
        if cut_off:
            # Close the cut-off turn as the template would; the model did not write this.
            self._append(trajectory, self.template.close_turn_ids(), None)
        self.stats["generated_tokens"] += len(generation.token_ids)
        text = generation.text
        if text is None:
            text = self.template.tokenizer.decode(generation.token_ids, skip_special_tokens=True)
        return text, len(generation.token_ids), cut_off

    def _room(self, trajectory: Trajectory) -> int:
        """Tokens left before the context limit."""
        limit = min(self.config.max_context, self.policy.max_context)
        return limit - len(trajectory.prompt_ids) - len(trajectory.response_ids)

    @staticmethod
    def _append(
        trajectory: Trajectory, ids: Sequence[int], logprobs: Sequence[float] | None
    ) -> None:
        trajectory.response_ids += ids
        trajectory.response_mask += [0 if logprobs is None else 1] * len(ids)
        trajectory.logprobs += list(logprobs) if logprobs is not None else [0.0] * len(ids)

    @staticmethod
    def _fail(trajectory: Trajectory, reason: FinishReason, message: str) -> None:
        trajectory.finish_reason = reason
        trajectory.reward = None
        trajectory.success = False
        trajectory.error = message

    @staticmethod
    async def _close(env: Environment) -> None:
        # Closing must not turn a finished episode into a failure.
        with contextlib.suppress(Exception):
            await env.close()

    # -- batched generation -------------------------------------------------------------

    async def _generate(self, request: GenerationRequest) -> Generation:
        future: asyncio.Future[Generation] = asyncio.get_running_loop().create_future()
        with self._arrived:
            self._queue.append((request, future))
            self._arrived.notify_all()
        assert self._wakeup is not None
        self._wakeup.set()
        return await future

    def _take(self, limit: int) -> list[_Queued]:
        """Up to `limit` queued requests (the streaming policy calls this from its thread)."""
        with self._queue_lock:
            taken, self._queue = self._queue[:limit], self._queue[limit:]
        return taken

    def _await_request(self, loop: asyncio.AbstractEventLoop) -> None:
        """Block (in the policy's thread) until a request is queued, or until no episode is
        left to queue one: an idle stream then waits out its episodes' environment steps
        instead of ending and starting again, so one stream serves the whole rollout."""
        with self._arrived:
            while not self._queue and self._live > 0 and not loop.is_closed():
                self._arrived.wait(timeout=0.1)

    async def _batcher(self) -> None:
        assert self._wakeup is not None
        limit = self.config.max_in_flight
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            if not self._queue:
                continue
            deadline = time.perf_counter() + self.config.batch_wait_s
            while len(self._queue) < min(self._live, limit) and time.perf_counter() < deadline:
                await asyncio.sleep(0.001)
            started = time.perf_counter()
            self.stats["generate_calls"] += 1
            try:  # a stream still open when the last episode ends is cancelled here
                if getattr(self.policy, "streams", False):
                    await self._stream()
                else:
                    await self._batch(self._take(limit))
            finally:
                self.stats["generate_s"] += time.perf_counter() - started
            if self._queue:
                self._wakeup.set()

    async def _batch(self, batch: list[_Queued]) -> None:
        """One fixed batch: every request decodes to its end before any result comes back."""
        try:
            results = await asyncio.to_thread(
                self.policy.generate, [request for request, _ in batch], self.sampling
            )
        except Exception as failure:
            for _, future in batch:
                future.set_exception(failure)
        else:
            for (_, future), result in zip(batch, results, strict=True):
                future.set_result(result)

    async def _stream(self) -> None:
        """Continuous batching: the policy takes requests as they arrive and returns each
        result as its row finishes, so an episode's next turn joins the batch still running."""
        arrivals = _Arrivals(self._take, asyncio.get_running_loop(), self._await_request)
        policy: StreamingPolicy = self.policy  # type: ignore[assignment]
        try:
            await asyncio.to_thread(policy.generate_stream, arrivals, self.sampling)
        except Exception as failure:
            # a broken decoder fails the requests still queued as well: starting it again
            # for them would fail the same way, again and again
            arrivals.fail(failure, queued=self._take(len(self._queue)))
