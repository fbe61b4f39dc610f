"""Build a policy from a model spec and a backend name."""

from __future__ import annotations

from typing import Literal

from agenttrain.agent.experts import OracleExpert
from agenttrain.agent.formats import ActionFormat
from agenttrain.policy.base import Policy, PolicyError
from agenttrain.policy.chat_adapter import ChatPolicyAdapter
from agenttrain.policy.models import load_hf, resolve

Backend = Literal["hf", "vllm", "openai"]


def load_policy(
    spec: str,
    *,
    env: str,
    action_format: ActionFormat,
    backend: Backend = "hf",
    device: str = "cpu",
    inference_dtype: Literal["auto", "float32", "bfloat16"] = "auto",
    decode: Literal["auto", "arena", "graph"] = "auto",
    draft_tokens: int | None = None,
    system_prompt: str | None = None,
    max_context: int | None = None,
    openai_base_url: str | None = None,
) -> Policy:
    """The policy `spec` names (see `policy.models`), served by `backend`; chat-only
    backends (the oracle, OpenAI-compatible chat APIs) behind `ChatPolicyAdapter`."""
    model = resolve(spec)
    if model.kind == "oracle":
        return ChatPolicyAdapter(OracleExpert(env, action_format))
    if model.kind == "openai" or backend == "openai":
        from agenttrain.policy.openai import OpenAIChatPolicy

        return ChatPolicyAdapter(
            OpenAIChatPolicy(model.remote_model or spec, base_url=openai_base_url)
        )
    if backend == "vllm":
        from agenttrain.policy.vllm import VLLMPolicy

        if model.base is not None:
            raise PolicyError(
                "the vllm backend needs a merged model: agenttrain export --merge-lora"
            )
        return VLLMPolicy(
            str(model.path), name=spec, system_prompt=system_prompt, max_context=max_context or 8192
        )
    if backend != "hf":
        raise PolicyError(f"unknown backend {backend!r}; choose hf, vllm or openai")
    from agenttrain.policy.hf import HFPolicy

    hf_model, tokenizer = load_hf(model, device=device)
    return HFPolicy(
        hf_model,
        tokenizer,
        name=spec,
        system_prompt=system_prompt,
        max_context=max_context,
        inference_dtype=inference_dtype,
        decode=decode,
        draft_tokens=draft_tokens,
    )
