"""Advantage estimators, registered by name (verl 0.9.1 `core_algos.py` formulas).

Every estimator maps token-level rewards [B, T] (an episode's score sits on its last model
token), the response mask [B, T] and group ids (one per episode; the n samples of a task
share one) to token-level advantages [B, T], zero where the mask is 0.

Adding an estimator is adding a function with `@register("name")`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

Estimator = Callable[..., torch.Tensor]
ESTIMATORS: dict[str, Estimator] = {}


def register(name: str) -> Callable[[Estimator], Estimator]:
    def add(function: Estimator) -> Estimator:
        ESTIMATORS[name] = function
        return function

    return add


def get_estimator(name: str) -> Estimator:
    if name not in ESTIMATORS:
        raise ValueError(
            f"unknown advantage estimator {name!r}; choose one of: {', '.join(ESTIMATORS)}"
        )
    return ESTIMATORS[name]


def _group_members(groups: Sequence[str]) -> dict[str, list[int]]:
    members: dict[str, list[int]] = {}
    for index, group in enumerate(groups):
        members.setdefault(group, []).append(index)
    return members


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(values - mean) / sqrt(var + eps) over the masked entries (unbiased variance, as verl).

    With fewer than two masked entries there is no variance to divide by: the values are only
    centred (one entry -> 0; none -> unchanged), never divided by a near-zero or NaN spread.
    """
    count = mask.sum()
    if count < 1:
        return values.clone()
    mean = (values * mask).sum() / count
    if count < 2:
        return values - mean
    var = (((values - mean) ** 2) * mask).sum() / (count - 1)
    return (values - mean) * torch.rsqrt(var + eps)


@register("grpo")
def grpo(
    rewards: torch.Tensor,
    mask: torch.Tensor,
    groups: Sequence[str],
    *,
    epsilon: float = 1e-6,
    norm_by_std: bool = True,
    **_: object,
) -> torch.Tensor:
    """A_i = (s_i - mean_g) / (std_g + ε), s_i = Σ_t r_it, std unbiased (N-1).

    A group of one has mean 0 and std 1 (so A = s). `norm_by_std=False` is Dr.GRPO: s_i - mean_g.
    """
    scores = rewards.sum(dim=-1)
    advantages = torch.zeros_like(scores)
    for members in _group_members(groups).values():
        group = scores[members]
        if len(members) == 1:
            mean, std = torch.tensor(0.0), torch.tensor(1.0)
        else:
            mean, std = group.mean(), group.std()  # torch.std is unbiased
        centred = group - mean
        advantages[members] = centred / (std + epsilon) if norm_by_std else centred
    return advantages[:, None] * mask


@register("rloo")
def rloo(
    rewards: torch.Tensor, mask: torch.Tensor, groups: Sequence[str], **_: object
) -> torch.Tensor:
    """A_i = n/(n-1) · (s_i - mean_g) = s_i - mean of the other samples; a group of one: A = s."""
    scores = rewards.sum(dim=-1)
    advantages = scores.clone()
    for members in _group_members(groups).values():
        n = len(members)
        if n > 1:
            group = scores[members]
            advantages[members] = n / (n - 1) * (group - group.mean())
    return advantages[:, None] * mask


@register("reinforce_plus_plus")
def reinforce_plus_plus(
    rewards: torch.Tensor,
    mask: torch.Tensor,
    groups: Sequence[str],
    *,
    gamma: float = 1.0,
    env_tokens: str = "carry",
    **_: object,
) -> torch.Tensor:
    """Discounted returns over model tokens, whitened over the batch's model tokens.

    `carry` (verl 0.9.1): G_t = r_t + γ·G_next on model tokens, where G_next is the return of
    the next model token; environment tokens (mask 0) pass it through undiscounted, so an
    outcome on the last reply reaches every reply of the episode.
    `restart` (verl 0.7.1): G_t = r_t + γ·G_{t+1} over all tokens, with the running return
    reset to 0 after every environment token, so the outcome reaches only the last reply.
    """
    if env_tokens not in ("carry", "restart"):
        raise ValueError(f"env_tokens must be 'carry' or 'restart', got {env_tokens!r}")
    returns = torch.zeros_like(rewards)
    running = torch.zeros(rewards.shape[0], dtype=rewards.dtype)
    for t in reversed(range(rewards.shape[1])):
        step = mask[:, t]
        candidate = rewards[:, t] + gamma * running
        if env_tokens == "carry":
            returns[:, t] = candidate * step
            running = candidate * step + running * (1 - step)
        else:
            returns[:, t] = candidate
            running = candidate * step
    return masked_whiten(returns, mask) * mask


@register("reinforce_plus_plus_baseline")
def reinforce_plus_plus_baseline(
    rewards: torch.Tensor, mask: torch.Tensor, groups: Sequence[str], **_: object
) -> torch.Tensor:
    """(s_i - mean_g) on every model token, whitened over the batch; a group of one has mean 0
    (as verl), so its advantage is its score before whitening."""
    scores = rewards.sum(dim=-1)
    centred = scores.clone()
    for members in _group_members(groups).values():
        if len(members) > 1:
            centred[members] = scores[members] - scores[members].mean()
    return masked_whiten(centred[:, None] * mask, mask) * mask
