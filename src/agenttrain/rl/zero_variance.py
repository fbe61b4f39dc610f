"""Learning from groups whose rewards are all equal (`algorithm.zero_variance_alpha`).

GRPO gives every episode of such a group a zero advantage, so after SFT, when most groups are
all-failed or all-solved, most of a step's episodes teach nothing. Following RL-ZVP (Le et
al., "No Prompt Left Behind", arXiv 2509.21880), these groups get an advantage whose sign
comes from the shared outcome and whose size comes from each token's entropy under the
policy being trained (detached, so it scales the gradient and is not optimised itself):

    all solved:  A_t = α · H_t                  (firm up the choices the policy was unsure of)
    none solved: A_t = −α · (max_s H_s − H_t)   (push down the confident tokens of a failure
                                                 most, the already uncertain ones least)

max over the episode's own model tokens. Groups with a spread keep their estimator's
advantages. agenttrain's form of the idea; the paper's settings were tuned for math answers.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from agenttrain.rollout.trajectory import Trajectory

__all__ = ["entropy_shaped_advantages", "zero_variance_signs"]


def zero_variance_signs(episodes: Sequence[Trajectory], scores: Sequence[float]) -> torch.Tensor:
    """[B] +1 for the episodes of a group whose scores are equal and all solved, −1 for a
    group whose scores are equal and none solved, 0 for the rest (groups with a spread,
    groups of one, equal scores with mixed outcomes under a shaped reward)."""
    members: dict[str, list[int]] = {}
    for index, episode in enumerate(episodes):
        members.setdefault(episode.group_id, []).append(index)
    signs = torch.zeros(len(episodes))
    for rows in members.values():
        if len(rows) < 2 or len({scores[row] for row in rows}) > 1:
            continue
        solved = {episodes[row].success for row in rows}
        if solved == {True}:
            signs[rows] = 1.0
        elif solved == {False}:
            signs[rows] = -1.0
    return signs


def entropy_shaped_advantages(
    advantages: torch.Tensor,
    entropy: torch.Tensor,
    mask: torch.Tensor,
    signs: torch.Tensor,
    alpha: float,
) -> torch.Tensor:
    """Advantages [B, T] with the rows of `signs` != 0 replaced by the entropy-shaped ones
    (module docstring); `entropy` [B, T] is detached here, zero where `mask` is 0."""
    entropy = entropy.detach() * mask
    peak = entropy.amax(dim=-1, keepdim=True)
    solved = alpha * entropy
    failed = -alpha * (peak - entropy) * mask
    sign = signs.to(advantages.device).unsqueeze(-1)
    shaped = torch.where(sign > 0, solved, failed)
    return torch.where(sign != 0, shaped, advantages)
