"""Truncated importance sampling (TIS) for the gap between rollout and trainer probabilities.

The rollout samples from the decoder's probabilities (bf16, CUDA graphs, other kernels), the
trainer scores the same tokens with its own forward pass; the two differ (measured in bf16:
|Δp| about 0.001-0.009 a token, docs/benchmarks.md), so a batch is slightly off-policy. TIS
weighs each token's policy-gradient term by

    w = min(pi_train_old / pi_rollout, threshold)            (level "token")
    w = min(prod_t pi_train_old / pi_rollout, threshold)     (level "sequence": the episode)

detached from the graph, as verl 0.9.1 does with `algorithm.rollout_correction.rollout_is`
and `rollout_is_threshold`. Where the old log-probs are the rollout's own (episodes played
with experience, or `actor.recompute_old_logprobs=false`) every weight is exactly 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from agenttrain.rl.losses import LOG_RATIO_BOUND

CorrectionLevel = Literal["token", "sequence"]


@dataclass(frozen=True)
class ImportanceWeights:
    weights: torch.Tensor
    """[B, T], detached; 0 where the mask is 0."""
    mean: float
    """Mean weight over the masked tokens, after truncation."""
    truncated: float
    """Share of masked tokens whose raw weight was above the threshold."""


def importance_weights(
    train_logprobs: torch.Tensor,
    rollout_logprobs: torch.Tensor,
    mask: torch.Tensor,
    level: CorrectionLevel,
    threshold: float,
) -> ImportanceWeights:
    """TIS weights of the tokens under `mask` (see the module docstring)."""
    with torch.no_grad():
        log_ratio = (train_logprobs - rollout_logprobs) * mask
        if level == "sequence":
            log_ratio = log_ratio.sum(-1, keepdim=True).expand_as(mask)
        raw = torch.exp(log_ratio.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)) * mask
        weights = raw.clamp(max=threshold)
        tokens = mask.sum().clamp(min=1.0)
        mean = float(weights.sum() / tokens)  # weights are 0 off the mask
        truncated = float(((raw > threshold).float() * mask).sum() / tokens)
    return ImportanceWeights(weights, mean, truncated)
