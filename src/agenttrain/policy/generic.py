"""Batched generation for any Hugging Face causal LM, via its own forward pass.

The fallback for architectures the fast decoder does not wire itself: left-padded batch,
the model's KV cache within a call, no reuse across calls. Correct everywhere, slower.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from agenttrain.policy.base import Generation, GenerationRequest, SamplingParams
from agenttrain.policy.sampling import sample


class GenericDecoder:
    def __init__(self, model: torch.nn.Module, stop_ids: frozenset[int], pad_id: int) -> None:
        self.model = model
        self.stop_ids = stop_ids
        self.pad_id = pad_id

    def release(self, key: str) -> None:
        """Nothing is kept between calls."""

    @torch.inference_mode()
    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams
    ) -> list[Generation]:
        device = next(self.model.parameters()).device
        width = max(len(r.prompt_ids) for r in requests)
        ids = torch.full((len(requests), width), self.pad_id, dtype=torch.long, device=device)
        mask = torch.zeros(len(requests), width, dtype=torch.long, device=device)
        for row, request in enumerate(requests):
            n = len(request.prompt_ids)
            ids[row, width - n :] = torch.tensor(list(request.prompt_ids), device=device)
            mask[row, width - n :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        cache, logits = out.past_key_values, out.logits[:, -1]
        generators = [
            None if r.seed is None else torch.Generator(device=device).manual_seed(r.seed)
            for r in requests
        ]
        limits = [r.max_new_tokens or params.max_new_tokens for r in requests]
        generated: list[list[int]] = [[] for _ in requests]
        logprobs: list[list[float]] = [[] for _ in requests]
        finished = [False] * len(requests)
        while True:
            tokens, chosen = sample(logits, params, generators)
            for row, (token, logprob) in enumerate(zip(tokens, chosen, strict=True)):
                if not finished[row]:
                    generated[row].append(token)
                    logprobs[row].append(logprob)
                    finished[row] = token in self.stop_ids or len(generated[row]) >= limits[row]
            if all(finished):
                break
            step = torch.tensor([[t] for t in tokens], device=device)
            mask = torch.cat(
                [mask, torch.tensor([[int(not f)] for f in finished], device=device)], 1
            )
            positions = positions[:, -1:] + 1
            out = self.model(
                input_ids=step,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
            )
            cache, logits = out.past_key_values, out.logits[:, -1]
        return [
            Generation(g, lp, "stop" if g and g[-1] in self.stop_ids else "length")
            for g, lp in zip(generated, logprobs, strict=True)
        ]
