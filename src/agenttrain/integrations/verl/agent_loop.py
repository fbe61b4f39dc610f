"""verl's agent loop for agenttrain environments (verl >= 0.8; tested with 0.9.1).

Registered as `agent_name: agenttrain`. Each dataset row (written by `agenttrain data --format
verl`) names an environment and a task; one `run` plays that episode:

- the conversation start comes from the row's prompt (our environment's instructions), the
  first observation from `reset(task_id)`;
- every model turn is one call to verl's LLM server client with one request id per episode
  (prefix-cache affinity); the reply's tokens are merged with verl's Continuous Token helpers
  (mask 1, with their log-probs), the action is parsed by our action format, the environment
  is stepped under a timeout, and its answer is merged as a user message (mask 0);
- the episode's reward (the environment's, AgentGym's convention) is `reward_score`, so verl's
  reward loop is skipped; per-turn rewards, finish reason, format errors and env errors go to
  `extra_fields`, which verl hands to reward functions and metrics.

An environment error (a crashed or unreachable env, a timeout) is never a score: the episode's
response mask is zeroed, so it contributes no gradient, and `extra_fields["env_error"]` is 1.
verl's stock estimators still count its placeholder score (0) in its group's mean and std;
see docs/verl.md.

Environments are held per worker process and event loop, not per trajectory: in-process
instances come from one `EnvSource` per environment, and HTTP sessions from that source's one
connection pool (verl builds a new agent-loop object for every trajectory).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from typing import Any

from agenttrain.envs import get_spec
from agenttrain.envs.base import describe_failure
from agenttrain.integrations.verl import require_verl
from agenttrain.integrations.verl.settings import AGENT_NAME, LoopSettings
from agenttrain.integrations.verl.workers import episode_turns
from agenttrain.rollout.turns import EpisodeTurns

require_verl("the agenttrain agent loop")

from verl.experimental.agent_loop.agent_loop import (  # noqa: E402
    AgentLoopBase,
    AgentLoopOutput,
    _agent_loop_registry,
    register,
)


def _plain(value: Any) -> Any:
    """Hydra hands nested settings over as OmegaConf containers; make them plain Python."""
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(value):
            return OmegaConf.to_container(value, resolve=True)
    except ImportError:
        pass
    return value


class AgentTrainAgentLoop(AgentLoopBase):
    """One episode of an agenttrain environment per dataset row."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        ours = {
            name: _plain(kwargs.pop(name)) for name in LoopSettings.model_fields if name in kwargs
        }
        super().__init__(*args, **kwargs)
        self.settings = LoopSettings(**ours)
        self.response_length = int(self.rollout_config.response_length)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        extra = dict(kwargs.get("extra_info") or {})
        if "env" not in extra or "task_id" not in extra:
            raise ValueError(
                "agenttrain agent loop: the row's extra_info needs 'env' and 'task_id' "
                "(write the data with `agenttrain data --format verl`)"
            )
        spec = get_spec(str(extra["env"]))
        turns = await episode_turns(spec, self.settings)
        episode = _Episode(self, turns, int(extra["task_id"]), sampling_params)
        started = time.perf_counter()
        try:
            await episode.play([dict(m) for m in kwargs["raw_prompt"]])
        finally:
            with contextlib.suppress(Exception):  # closing must not fail a finished episode
                await turns.env.close()
        return episode.output(time.perf_counter() - started)


# verl's worker fills its registry from `agent_loop.yaml` (our settings included) and imports
# this module on the first instantiation; registering unconditionally here would overwrite
# that entry with a bare target, so every later trajectory lost its settings (issue 23).
if AGENT_NAME not in _agent_loop_registry:
    register(AGENT_NAME)(AgentTrainAgentLoop)


class _Episode:
    """The token bookkeeping of one episode; the turn logic is `rollout.turns`."""

    def __init__(
        self,
        loop: AgentTrainAgentLoop,
        turns: EpisodeTurns,
        task_id: int,
        sampling_params: dict[str, Any],
    ) -> None:
        self.loop = loop
        self.turns = turns
        self.spec = turns.spec
        self.task_id = task_id
        self.sampling_params = sampling_params
        self.settings = loop.settings
        self.request_id = uuid.uuid4().hex
        self.prompt_ids: list[int] = []
        self.ids: list[int] = []
        self.mask: list[int] = []
        self.logprobs: list[float] = []
        self.generate_s = 0.0

    async def play(self, messages: list[dict[str, Any]]) -> None:
        """Play to the end; any exception on the agent's side is this episode's agent_error."""
        try:
            await self._play(messages)
        except Exception as failure:  # one episode's failure, never the batch's
            self.turns.end("agent_error", describe_failure(failure))
        if self.turns.finish is None:
            self.turns.end("max_turns")

    async def _play(self, messages: list[dict[str, Any]]) -> None:
        turns = self.turns
        first = await turns.reset(self.task_id)
        if first is None:
            return
        already = messages and messages[-1] == {"role": "user", "content": first.text}
        if not already:  # data written for verl <= 0.7 carries the first observation
            messages.append({"role": "user", "content": first.text})
        self.prompt_ids = await self.loop.ct_build_initial_tokens(messages)
        self.ids = list(self.prompt_ids)
        while not turns.out_of_turns():
            budget = self.loop.response_length - len(self.mask)
            if budget < 2:
                return turns.end("context_limit")
            reply = await self._model_turn(budget)
            result = await turns.play(reply)
            if result.finish is not None:
                return
            # The reply is already in the token stream: take `previous` including it, so only
            # the observation is new context (else the reply is re-tokenized with mask 0).
            messages.append({"role": "assistant", "content": reply})
            previous = list(messages)
            messages.append({"role": "user", "content": result.observation})
            merged, self.mask, self.logprobs = await self.loop.ct_merge_context_msg(
                previous, messages, self.ids, self.mask, self.logprobs
            )
            self.ids = list(merged.token_ids)

    async def _model_turn(self, budget: int) -> str:
        params = dict(self.sampling_params)
        cap = self.settings.max_new_tokens
        params["max_tokens"] = min(budget, cap) if cap else budget
        started = time.perf_counter()
        out = await self.loop.server_manager.generate(
            request_id=self.request_id, prompt_ids=self.ids, sampling_params=params
        )
        self.generate_s += time.perf_counter() - started
        merged, self.mask, self.logprobs = await self.loop.ct_merge_assistant_token(
            self.ids, out.token_ids, self.mask, self.logprobs, assistant_logprobs=out.log_probs
        )
        self.ids = list(merged.token_ids)
        return self.loop.tokenizer.decode(out.token_ids, skip_special_tokens=True)

    def output(self, wall_s: float) -> AgentLoopOutput:
        turns = self.turns
        prompt_ids = self.prompt_ids
        if not prompt_ids:  # the reset failed: a one-token placeholder verl can pad
            prompt_ids = [self.loop.tokenizer.pad_token_id or 0]
        response_ids = self.ids[len(self.prompt_ids) :][: self.loop.response_length]
        mask = self.mask[: len(response_ids)]
        # verl puts the score on the last response token; end on the model's last token, so
        # estimators that carry returns through model tokens only see it (issue 23, item 4).
        # The environment's answer after the last turn was never acted on.
        keep = _after_last_model_token(mask)
        response_ids, mask = response_ids[:keep], mask[:keep]
        if turns.errored:
            mask = [0] * len(mask)  # excluded from the loss, never a score
        reward = turns.episode_reward()
        score = 0.0 if reward is None else float(reward)
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids,
            response_mask=mask,
            response_logprobs=self.logprobs[:keep],
            reward_score=None if self.settings.reward_function else score,
            num_turns=2 * turns.turns + 1,
            metrics={"generate_sequences": self.generate_s, "tool_calls": wall_s - self.generate_s},
            extra_fields={
                "turn_scores": list(turns.rewards),
                "env_reward": score,
                "tool_rewards": [],
                "agenttrain_env": self.spec.name,
                "agenttrain_task_id": self.task_id,
                "finish_reason": turns.finish,
                "env_error": int(turns.finish == "env_error"),
                "agent_error": int(turns.finish == "agent_error"),
                "env_error_message": turns.error or "",
                "format_errors": turns.format_errors,
                "success": int(turns.succeeded()),
            },
        )


def _after_last_model_token(mask: list[int]) -> int:
    """The length of the response up to and including its last model token (mask 1); the
    whole response when it has none (an episode that failed before the model spoke)."""
    for position in range(len(mask) - 1, -1, -1):
        if mask[position]:
            return position + 1
    return len(mask)
