"""Policies: token-in-token-out (Hugging Face, vLLM) and text-only (OpenAI-compatible, oracle)."""

from agenttrain.policy.base import (
    ChatMessage,
    Generation,
    GenerationRequest,
    PolicyError,
    SamplingParams,
    TextGeneration,
    TextPolicy,
    TokenPolicy,
)

__all__ = [
    "ChatMessage",
    "Generation",
    "GenerationRequest",
    "PolicyError",
    "SamplingParams",
    "TextGeneration",
    "TextPolicy",
    "TokenPolicy",
]
