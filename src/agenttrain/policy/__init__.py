"""Policies: one token-level interface (Hugging Face, vLLM), chat-only backends (OpenAI-compatible,
oracle) behind it through `ChatPolicyAdapter`."""

from agenttrain.policy.base import (
    ChatBackend,
    ChatMessage,
    Generation,
    GenerationRequest,
    Policy,
    PolicyError,
    SamplingParams,
    TextGeneration,
)

__all__ = [
    "ChatBackend",
    "ChatMessage",
    "Generation",
    "GenerationRequest",
    "Policy",
    "PolicyError",
    "SamplingParams",
    "TextGeneration",
]
