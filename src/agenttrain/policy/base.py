"""What a policy is: one token-level call every backend implements.

`Policy.generate` takes a batch of requests (prompt token ids, plus the conversation as text)
and returns sampled token ids with their log-probabilities. The engine calls nothing else, so
Hugging Face, vLLM and any future backend are interchangeable, and RL trains on exactly the
tokens that were sampled. Backends that only speak text (an OpenAI-compatible chat API, an
environment's oracle) implement the small `ChatBackend` and are put behind the same call by
`ChatPolicyAdapter`: they answer from the conversation and return text with no token ids
(`template` None), which serves evaluation and demonstrations, not RL updates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field


class SamplingParams(BaseModel):
    """How to sample. `temperature=0` is greedy decoding."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float = Field(1.0, ge=0.0, description="0 = greedy")
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0, description="0 = no top-k cut")
    max_new_tokens: int = Field(256, ge=1)
    seed: int | None = Field(None, description="makes sampling reproducible")


@dataclass
class ChatMessage:
    role: str
    content: str

    def to_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


@dataclass
class GenerationRequest:
    """One prompt to continue. `key` names the episode so a policy can reuse its cache."""

    prompt_ids: Sequence[int]
    key: str | None = None
    max_new_tokens: int | None = None
    """Overrides `SamplingParams.max_new_tokens` for this request (e.g. near the context limit)."""
    seed: int | None = None
    """Seeds this request's own sampler, so its tokens do not depend on the batch it lands in."""
    messages: Sequence[ChatMessage] = ()
    """The same conversation as chat messages, for backends that only speak text."""


@dataclass
class Generation:
    token_ids: list[int]
    logprobs: list[float]
    """Log-probability of each sampled token under the temperature-scaled distribution."""
    finish_reason: Literal["stop", "length"]
    """`stop`: ended with an end-of-turn token (included in `token_ids`); `length`: cut off."""
    text: str | None = None
    """The reply as text, from backends without token ids (else decoded from `token_ids`)."""
    error: str | None = None
    """Set when the backend failed on this request alone (e.g. a solver raised): the episode
    ends as `agent_error` with this message; the other requests of the batch go on."""


@dataclass
class TextGeneration:
    text: str
    finish_reason: Literal["stop", "length"] = "stop"
    usage: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Policy(Protocol):
    """The one interface the rollout engine uses (verl's agent-loop call, batched)."""

    name: str
    max_context: int
    template: Any
    """The `ChatTemplate` that turns messages into prompt ids; None for text-only backends,
    whose episodes carry text and no token ids."""

    def generate(
        self, requests: Sequence[GenerationRequest], sampling: SamplingParams
    ) -> list[Generation]:
        """Continue every request in one batch; blocking (the engine runs it in a thread)."""
        ...

    def release(self, key: str) -> None:
        """Forget what was cached for `key` (its episode ended)."""
        ...


class RequestStream(Protocol):
    """Requests that arrive while a batch is decoding (continuous batching): a policy that
    streams (`generate_stream`) takes them between decode steps and hands each result back
    as soon as its row finishes, so an episode plays its next turn while the rest decode."""

    def take(self, limit: int, idle: bool = False) -> list[tuple[GenerationRequest, Any]]:
        """Up to `limit` waiting requests with their handles; [] when none. Never blocks
        while rows decode; `idle` (no row is live, and [] ends the stream) lets a stream
        that expects more requests wait for the next one instead."""
        ...

    def deliver(self, handle: Any, generation: Generation) -> None:
        """The finished result of the request taken with `handle`."""
        ...


@runtime_checkable
class StreamingPolicy(Policy, Protocol):
    """A policy whose batch stays open: rows join and leave between decode steps."""

    streams: bool
    """False where this policy's decoder cannot stream (then the engine calls `generate`)."""

    def generate_stream(self, stream: RequestStream, sampling: SamplingParams) -> None:
        """Decode what `stream` hands over until no row is live and none is waiting;
        blocking (the engine runs it in a thread)."""
        ...


@runtime_checkable
class ChatBackend(Protocol):
    """A backend that only speaks chat messages (OpenAI-compatible APIs, oracles)."""

    name: str

    async def chat(
        self, conversations: Sequence[Sequence[ChatMessage]], sampling: SamplingParams
    ) -> list[TextGeneration]: ...


class PolicyError(RuntimeError):
    """A policy could not be built or could not answer."""
