"""The Hugging Face backend: a transformers model on CPU or one CUDA GPU.

Generation may run in a lower precision than the model it serves: on a CPU with native
bfloat16 (AVX512-BF16/AMX) a bf16 copy of the weights generates about twice as fast, as
vLLM's bf16 rollouts do next to an fp32 trainer. Training then recomputes log-probabilities
with its own weights (verl's `old_log_prob`), and `sync_weights()` refreshes the copy after
every update.
"""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import torch

from agenttrain.policy.base import Generation, GenerationRequest, RequestStream, SamplingParams
from agenttrain.policy.chat import ChatTemplate
from agenttrain.policy.decoder import DRAFT_TOKENS, LlamaFamilyDecoder, supports
from agenttrain.policy.generic import GenericDecoder
from agenttrain.policy.graph_decoder import GRAPH_DRAFT_TOKENS, GraphDecoder
from agenttrain.policy.merged import is_lora, merged_copy, merged_state

DEFAULT_SLOTS = 32
InferenceDtype = Literal["auto", "float32", "bfloat16"]
DecodePath = Literal["auto", "arena", "graph"]
"""arena: the CPU-tuned decoder (one host-driven step per token); graph: static-shape steps,
CUDA graphs on a GPU; auto: graph on CUDA, arena elsewhere."""


@functools.cache
def cpu_has_native_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return " avx512_bf16" in flags or " amx_bf16" in flags


def resolve_inference_dtype(choice: InferenceDtype, device: torch.device) -> torch.dtype:
    if choice == "float32":
        return torch.float32
    if choice == "bfloat16":
        return torch.bfloat16
    if device.type == "cuda" or cpu_has_native_bf16():
        return torch.bfloat16
    return torch.float32


class HFPolicy:
    """Batched, token-in-token-out generation from a transformers causal LM."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        *,
        name: str,
        system_prompt: str | None = None,
        max_context: int | None = None,
        cache_slots: int = DEFAULT_SLOTS,
        fast: bool = True,
        inference_dtype: InferenceDtype | None = None,
        decode: DecodePath = "auto",
        compile_step: bool | None = None,
        draft_tokens: int | None = None,
    ) -> None:
        self.name = name
        self.model = model
        device = next(model.parameters()).device
        own_dtype = next(model.parameters()).dtype
        # None: the model's own dtype. A float32 default once decoded bf16 models on a GPU
        # from a float32 copy, at a third of the speed, without a word.
        dtype = (
            own_dtype
            if inference_dtype is None
            else resolve_inference_dtype(inference_dtype, device)
        )
        self.generator_model = self._generation_copy(model, dtype, own_dtype)
        self.tokenizer = tokenizer
        self.template = ChatTemplate(tokenizer, system_prompt)
        self.max_context = max_context or int(model.config.max_position_embeddings)
        stop_ids = self.template.stop_ids
        pad_id = tokenizer.pad_token_id
        if pad_id is None:
            pad_id = self.template.end_of_turn_id
        self.decoder: LlamaFamilyDecoder | GenericDecoder
        if decode == "auto":
            decode = "graph" if device.type == "cuda" else "arena"
        if fast and supports(model) and decode == "graph":
            self.decoder = GraphDecoder(
                self.generator_model,
                stop_ids,
                pad_id,
                cache_slots,
                compile_step=compile_step,  # None: compiled on CUDA
                draft_tokens=GRAPH_DRAFT_TOKENS if draft_tokens is None else draft_tokens,
            )
        elif fast and supports(model):
            self.decoder = LlamaFamilyDecoder(
                self.generator_model,
                stop_ids,
                pad_id,
                cache_slots,
                DRAFT_TOKENS if draft_tokens is None else draft_tokens,
            )
        else:
            self.decoder = GenericDecoder(self.generator_model, stop_ids, pad_id)

    @staticmethod
    def _generation_copy(
        model: torch.nn.Module, dtype: torch.dtype, own_dtype: torch.dtype
    ) -> torch.nn.Module:
        """The model generation runs: a LoRA model merged (policy/merged.py), a plain one in
        the inference dtype (itself when the dtypes agree)."""
        if is_lora(model):
            return merged_copy(model, dtype)
        return (model if dtype == own_dtype else copy.deepcopy(model).to(dtype)).eval()

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def generate(
        self, requests: Sequence[GenerationRequest], sampling: SamplingParams
    ) -> list[Generation]:
        if not requests:
            return []
        with self._sampling_mode():
            return self.decoder.generate(requests, sampling)

    @property
    def streams(self) -> bool:
        """Continuous batching (`generate_stream`): both Llama-family decoders (arena and
        graph); models outside the Llama family decode fixed batches."""
        return isinstance(self.decoder, LlamaFamilyDecoder)

    def generate_stream(self, stream: RequestStream, sampling: SamplingParams) -> None:
        if not self.streams:
            raise TypeError(f"{type(self.decoder).__name__} decodes fixed batches only")
        with self._sampling_mode():
            self.decoder.stream(stream, sampling)

    @contextlib.contextmanager
    def _sampling_mode(self) -> Iterator[None]:
        """No dropout while sampling, even when the generation model is the trained one."""
        training = self.generator_model.training
        self.generator_model.eval()
        try:
            yield
        finally:
            self.generator_model.train(training)

    def release(self, key: str) -> None:
        self.decoder.release(key)

    @property
    def inference_dtype(self) -> torch.dtype:
        return next(self.generator_model.parameters()).dtype

    def free_cache(self) -> None:
        """Give back the keys/values cache's memory (1.5 GB for SmolLM2 at 32 episodes of 2,048
        tokens in bf16) while it is not needed: a training update needs memory, and the weights
        it changes make the cached keys/values stale anyway. The next call allocates again.
        Not on a GPU: the graph path's CUDA graphs are captured against the cache's memory
        and would be captured again after every update."""
        if isinstance(self.decoder, LlamaFamilyDecoder) and self.device.type == "cpu":
            self.decoder.free_memory()

    def sync_weights(self) -> None:
        """The model was updated: refresh the generation copy and drop cached keys/values."""
        if is_lora(self.model):
            self.generator_model.load_state_dict(merged_state(self.model))
        elif self.generator_model is not self.model:
            self.generator_model.load_state_dict(self.model.state_dict())
        if isinstance(self.decoder, LlamaFamilyDecoder):
            self.decoder.clear()
