"""Turning logits into sampled tokens and their log-probabilities.

The recorded log-probability is that of the sampled token under the temperature-scaled
distribution before top-k/top-p truncation: what verl recomputes for the PPO ratio
(`logits / temperature`, then log-softmax), so old and new log-probs are comparable.
"""

from __future__ import annotations

import torch

from agenttrain.policy.base import SamplingParams


def truncate(scaled: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Set logits outside the top-k / nucleus to -inf (rows of a [B, V] tensor)."""
    if top_k and top_k < scaled.shape[-1]:
        kth = torch.topk(scaled, top_k, dim=-1).values[..., -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(scaled, descending=True, dim=-1)
        probs = torch.softmax(sorted_logits, dim=-1)
        beyond = probs.cumsum(dim=-1) - probs > top_p  # keeps the token that crosses p
        sorted_logits = sorted_logits.masked_fill(beyond, float("-inf"))
        scaled = torch.full_like(scaled, float("-inf")).scatter(-1, order, sorted_logits)
    return scaled


def sample(
    logits: torch.Tensor, params: SamplingParams, generators: list[torch.Generator | None]
) -> tuple[list[int], list[float]]:
    """One token per row of `logits` [B, V] (float32), with its log-probability."""
    logits = logits.float()
    if params.temperature == 0:
        tokens = logits.argmax(dim=-1)
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, tokens[:, None])[:, 0]
        return tokens.tolist(), logprobs.tolist()
    scaled = logits / params.temperature
    logprobs_all = torch.log_softmax(scaled, dim=-1)
    probs = torch.softmax(truncate(scaled, params.top_k, params.top_p), dim=-1)
    # Inverse-CDF sampling: one uniform per row from that row's own generator, so a row's
    # token does not depend on the other rows (torch.multinomial per row cost ~1 ms each).
    uniforms = torch.cat(
        [torch.rand(1, generator=generator, device=logits.device) for generator in generators]
    )
    cdf = probs.cumsum(dim=-1)
    target = (uniforms * cdf[:, -1])[:, None]
    chosen = torch.searchsorted(cdf, target, right=True).clamp(max=cdf.shape[-1] - 1)
    return chosen[:, 0].tolist(), logprobs_all.gather(-1, chosen)[:, 0].tolist()


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float) -> torch.Tensor:
    """Log-probabilities of `tokens` under `logits` scaled like sampling did (for checks and
    for training's recomputation): [..., V] logits, [...] tokens."""
    scaled = logits.float() / (temperature if temperature > 0 else 1.0)
    return torch.log_softmax(scaled, dim=-1).gather(-1, tokens[..., None])[..., 0]
