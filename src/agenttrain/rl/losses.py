"""Policy-gradient loss, entropy and loss aggregation (verl 0.9.1 formulas).

`agg_loss` alone decides what "mean over tokens vs sequences" means. Its `totals` are those of
the whole mini-batch, so summing micro-batch losses gives exactly the mini-batch loss
(gradient accumulation does not change the objective).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from agenttrain.logprobs import entropy_from_logits

__all__ = ["AGG_MODES", "PolicyLoss", "Totals", "agg_loss", "entropy_from_logits", "ppo_clip_loss"]

AggMode = Literal[
    "token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"
]
AGG_MODES: tuple[str, ...] = AggMode.__args__  # type: ignore[attr-defined]

LOG_RATIO_BOUND = 20.0
"""Log-ratios are clamped to ±this before `exp`, so one wild token cannot overflow."""


@dataclass(frozen=True)
class Totals:
    """What a mini-batch loss is normalised by: its model tokens and its non-empty sequences."""

    tokens: int
    sequences: int
    loss_scale_factor: int = 1
    """`seq-mean-token-sum-norm` divides by this constant (Dr.GRPO; verl's name). It must not
    change from step to step, or the effective learning rate would."""


def agg_loss(loss: torch.Tensor, mask: torch.Tensor, mode: str, totals: Totals) -> torch.Tensor:
    """Aggregate a per-token loss [B, T] under `mask`.

    token-mean: Σ mask·L / tokens
    seq-mean-token-sum: Σ_seq Σ_t mask·L / sequences
    seq-mean-token-mean: Σ_seq (Σ_t mask·L / Σ_t mask) / sequences
    seq-mean-token-sum-norm: seq-mean-token-sum / loss_scale_factor
    """
    masked = loss * mask
    if mode == "token-mean":
        return masked.sum() / max(totals.tokens, 1)
    per_sequence = masked.sum(dim=-1)
    if mode in ("seq-mean-token-sum", "seq-mean-token-sum-norm"):
        value = per_sequence.sum() / max(totals.sequences, 1)
        return value / totals.loss_scale_factor if mode.endswith("-norm") else value
    if mode == "seq-mean-token-mean":
        counts = mask.sum(dim=-1)
        present = counts > 0  # fully masked sequences are excluded
        return (per_sequence[present] / counts[present]).sum() / max(totals.sequences, 1)
    raise ValueError(f"unknown loss aggregation {mode!r}; choose one of: {', '.join(AGG_MODES)}")


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / mask.sum().clamp(min=1)


@dataclass
class PolicyLoss:
    loss: torch.Tensor
    clipfrac: torch.Tensor
    clipfrac_lower: torch.Tensor
    ppo_kl: torch.Tensor


def ppo_clip_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float,
    clip_high: float | torch.Tensor,
    clip_c: float,
    agg_mode: str,
    totals: Totals,
    weights: torch.Tensor | None = None,
) -> PolicyLoss:
    """PPO clipped surrogate with separate low/high clip (DAPO clip-higher) and dual-clip.

    ratio = exp(clamp(logp - old_logp, ±20));  L_clip = max(-A·ratio, -A·clip(ratio, 1-low, 1+high))
    for A < 0: L = min(L_clip, -A·clip_c)   (dual-clip, clip_c > 1)

    `clip_high` may be a tensor broadcast over the tokens, e.g. [B, 1]: episodes played with
    experience get their own upper clip (AgentEvolver's off_cliprange_high). `weights`
    (detached, [B, T]) scale each token's loss: rollout importance weights (TIS).
    """
    log_ratio = (logprobs - old_logprobs).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    ratio = torch.exp(log_ratio)
    upper = 1.0 + torch.as_tensor(clip_high, dtype=ratio.dtype, device=ratio.device)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.minimum(ratio.clamp(min=1.0 - clip_low), upper)
    surrogate = torch.maximum(unclipped, clipped)
    dual = -advantages * clip_c
    loss = torch.where(advantages < 0, torch.minimum(surrogate, dual), surrogate)
    if weights is not None:
        loss = loss * weights
    with torch.no_grad():
        clipfrac = masked_mean((clipped > unclipped).float(), mask)
        clipfrac_lower = masked_mean(((surrogate > dual) & (advantages < 0)).float(), mask)
        ppo_kl = masked_mean(-log_ratio, mask)
    return PolicyLoss(agg_loss(loss, mask, agg_mode, totals), clipfrac, clipfrac_lower, ppo_kl)
