"""What a policy is: token ids in, sampled token ids and their log-probabilities out.

Token ids are the unit of exchange (`TokenPolicy`): the rollout engine never decodes model
output to re-encode it for training. Policies that only speak text (an OpenAI-compatible
API, an environment's oracle) implement `TextPolicy`; episodes they play carry text only and
serve evaluation and demonstration collection, not RL updates.
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
class GenerationRequest:
    """One prompt to continue. `key` names the episode so a policy can reuse its cache."""

    prompt_ids: Sequence[int]
    key: str | None = None
    max_new_tokens: int | None = None
    """Overrides `SamplingParams.max_new_tokens` for this request (e.g. near the context limit)."""
    seed: int | None = None
    """Seeds this request's own sampler, so its tokens do not depend on the batch it lands in."""


@dataclass
class Generation:
    token_ids: list[int]
    logprobs: list[float]
    """Log-probability of each sampled token under the temperature-scaled distribution."""
    finish_reason: Literal["stop", "length"]
    """`stop`: ended with an end-of-turn token (included in `token_ids`); `length`: cut off."""


@dataclass
class ChatMessage:
    role: str
    content: str

    def to_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


@dataclass
class TextGeneration:
    text: str
    finish_reason: Literal["stop", "length"] = "stop"
    usage: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class TokenPolicy(Protocol):
    """A policy over token ids (Hugging Face, vLLM): what RL trains."""

    name: str
    tokenizer: Any
    max_context: int

    def generate(
        self, requests: Sequence[GenerationRequest], sampling: SamplingParams
    ) -> list[Generation]:
        """Continue every prompt in one batch; blocking (the engine runs it in a thread)."""
        ...

    def release(self, key: str) -> None:
        """Forget what was cached for `key` (its episode ended)."""
        ...


@runtime_checkable
class TextPolicy(Protocol):
    """A policy over chat messages (OpenAI-compatible APIs, oracles): evaluation and demos."""

    name: str

    async def chat(
        self, conversations: Sequence[Sequence[ChatMessage]], sampling: SamplingParams
    ) -> list[TextGeneration]: ...


class PolicyError(RuntimeError):
    """A policy could not be built or could not answer."""
