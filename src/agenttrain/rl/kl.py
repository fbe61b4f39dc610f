"""KL to the reference policy: per-token estimators and the in-reward coefficient controllers
(verl 0.9.1 `kl_penalty_forward`, `FixedKLController`, `AdaptiveKLController`)."""

from __future__ import annotations

from typing import Literal

import torch

KLType = Literal["k1", "kl", "abs", "k2", "mse", "k3", "low_var_kl", "k1+", "k3+", "low_var_kl+"]
KL_TYPES: tuple[str, ...] = KLType.__args__  # type: ignore[attr-defined]


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-token KL estimate between the policy and the reference.

    k1 = logp - ref;  abs = |logp - ref|;  k2 = ½ (logp - ref)²
    k3 (low_var_kl) = exp(ref - logp) - (ref - logp) - 1, with ref - logp clamped to ±20 and the
    result to [-10, 10].  A trailing `+` keeps the value but takes the gradient of k2
    (straight-through).
    """
    if kind.endswith("+"):
        value = kl_penalty(logprobs, ref_logprobs, kind[:-1])
        k2 = kl_penalty(logprobs, ref_logprobs, "k2")
        return k2 + (value - k2).detach()
    diff = logprobs - ref_logprobs
    if kind in ("k1", "kl"):
        return diff
    if kind == "abs":
        return diff.abs()
    if kind in ("k2", "mse"):
        return 0.5 * diff.square()
    if kind in ("k3", "low_var_kl"):
        delta = (-diff).clamp(-20.0, 20.0)
        return (torch.exp(delta) - delta - 1.0).clamp(-10.0, 10.0)
    raise ValueError(f"unknown KL estimator {kind!r}; choose one of: {', '.join(KL_TYPES)}")


class KLController:
    """The in-reward KL coefficient: fixed, or adapted towards a target KL (Ziegler et al.)."""

    def __init__(
        self, coef: float, adaptive: bool = False, target: float = 6.0, horizon: int = 10000
    ) -> None:
        self.value = coef
        self.adaptive = adaptive
        self.target = target
        self.horizon = horizon

    def update(self, current_kl: float, steps: int) -> None:
        """β ← β · (1 + clip(kl/target - 1, ±0.2) · steps/horizon) when adaptive."""
        if not self.adaptive:
            return
        error = max(-0.2, min(0.2, current_kl / self.target - 1.0))
        self.value *= 1.0 + error * steps / self.horizon

    def state_dict(self) -> dict[str, float]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.value = state["value"]
