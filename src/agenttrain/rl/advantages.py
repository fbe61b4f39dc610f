"""Advantage estimators, registered by name (verl 0.9.1 `core_algos.py` formulas).

Every estimator maps token-level rewards [B, T] (an episode's score sits on its last model
token), the response mask [B, T] and group ids (one per episode; the n samples of a task
share one) to token-level advantages [B, T], zero where the mask is 0.

Adding an estimator is adding a function with `@register("name")`. Turn-level estimators
(`TURN_LEVEL_ESTIMATORS`) also take each episode's turns: the token span of every model turn
and the anchor text it acted on; their rewards sit on each turn's last model token.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from itertools import accumulate
from typing import TYPE_CHECKING

import torch

from agenttrain.rollout.trajectory import Trajectory

if TYPE_CHECKING:
    from agenttrain.envs.base import EnvSpec

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


def group_normalised(
    scores: torch.Tensor, groups: Sequence[str], epsilon: float, norm_by_std: bool
) -> torch.Tensor:
    """(s_i - mean_g) / (std_g + ε) per episode, std unbiased; a group of one: mean 0, std 1."""
    advantages = torch.zeros_like(scores)
    for members in _group_members(groups).values():
        group = scores[members]
        if len(members) == 1:
            mean, std = torch.tensor(0.0), torch.tensor(1.0)
        else:
            mean, std = group.mean(), group.std()  # torch.std is unbiased
        centred = group - mean
        advantages[members] = centred / (std + epsilon) if norm_by_std else centred
    return advantages


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
    return group_normalised(scores, groups, epsilon, norm_by_std)[:, None] * mask


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


# -- GiGPO: episode groups plus step groups of identical anchor states -------------------

TURN_LEVEL_ESTIMATORS = ("gigpo",)
"""Estimators that need each episode's turn structure (`turn_spans`, `anchors`)."""
Span = tuple[int, int]


def normalise_anchor(text: str) -> str:
    """Anchor texts match exactly up to whitespace (runs collapsed, ends stripped)."""
    return " ".join(text.split())


States = Callable[[int, Sequence[str]], list[str]]
"""An environment's states before each action and after the last (`EnvSpec.states`)."""


def turn_anchors(trajectory: Trajectory, states: States | None = None) -> list[str]:
    """The environment state each model turn acted on, as text.

    By default the observation it answered: turn 0's is the first observation (the task;
    shared by a group), turn k's is turn k-1's observation. With the environment's `states`
    (`algorithm.gigpo.anchor=state`), the state its actions had led to.

    A turn that did not step the environment (a format error) left the state as it was, so
    it keeps the previous turn's anchor: format feedback text is not a state, and anchoring
    on it pooled turns of different states into one step group (issue 23). The turns'
    replies are the transcript's last `num_turns` assistant messages, whatever the
    conversation start holds.
    """
    turns = trajectory.turns
    if states is not None and turns:
        actions = [turn.action for turn in turns if turn.action is not None]
        known = states(trajectory.task_id, actions)
        sent = accumulate((turn.action is not None for turn in turns[:-1]), initial=0)
        return [normalise_anchor(known[count]) for count in sent]
    replies = [i for i, m in enumerate(trajectory.messages) if m["role"] == "assistant"]
    if len(replies) < trajectory.num_turns:
        raise ValueError(
            f"episode {trajectory.episode_id} has {trajectory.num_turns} turns but "
            f"{len(replies)} replies in its messages: its anchors are unknown"
        )
    turn_replies = replies[len(replies) - trajectory.num_turns :]
    anchors: list[str] = []
    for k, reply in enumerate(turn_replies):
        text = trajectory.messages[reply - 1]["content"]
        stepped = k == 0 or turns[k - 1].action is not None
        anchors.append(normalise_anchor(text) if stepped else anchors[-1])
    return anchors


def anchor_states(specs: Sequence[EnvSpec], anchor: str) -> dict[str, States]:
    """{env name: its `states`} for `algorithm.gigpo.anchor=state` ({} for observation); an
    environment without them is a configuration error, not a silent fallback."""
    if anchor == "observation":
        return {}
    missing = [spec.name for spec in specs if spec.states is None]
    if missing:
        raise ValueError(
            f"algorithm.gigpo.anchor=state: {', '.join(missing)} does not report its state; "
            "use algorithm.gigpo.anchor=observation"
        )
    return {spec.name: spec.states for spec in specs}


def turn_step_rewards(trajectory: Trajectory, score: float) -> list[float]:
    """Per-turn rewards that add up to the episode's score.

    The environment's per-turn rewards when they add up to the score (a `sum` environment,
    or one that rewards only the last step); otherwise (a `last` environment with rewards on
    the way, a custom reward function) the score is the last turn's reward, the others 0.
    """
    rewards = trajectory.turn_rewards
    if not rewards:
        return []
    if math.isclose(sum(rewards), score, rel_tol=1e-9, abs_tol=1e-9):
        return rewards
    return [0.0] * (len(rewards) - 1) + [score]


def discounted_returns(rewards: Sequence[float], gamma: float) -> list[float]:
    """R_k = Σ_{j>=k} γ^(j-k) r_j."""
    returns: list[float] = []
    running = 0.0
    for reward in reversed(rewards):
        running = reward + gamma * running
        returns.append(running)
    return returns[::-1]


def step_group_advantages(
    returns: Sequence[Sequence[float]],
    anchors: Sequence[Sequence[str]],
    groups: Sequence[str],
    *,
    epsilon: float,
    norm_by_std: bool,
) -> list[list[float]]:
    """A^S per turn: (R_k - mean) / (std + ε) over the turns of one group with the same anchor
    (std unbiased; mean-only when `norm_by_std` is false); a step group of one gets 0."""
    step_groups: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for episode, (group, episode_anchors) in enumerate(zip(groups, anchors, strict=True)):
        for turn, anchor in enumerate(episode_anchors):
            step_groups.setdefault((group, anchor), []).append((episode, turn))
    advantages = [[0.0] * len(episode_returns) for episode_returns in returns]
    for members in step_groups.values():
        if len(members) < 2:
            continue
        values = torch.tensor([returns[e][k] for e, k in members], dtype=torch.float64)
        centred = values - values.mean()
        normalised = centred / (values.std() + epsilon) if norm_by_std else centred
        for (episode, turn), value in zip(members, normalised.tolist(), strict=True):
            advantages[episode][turn] = value
    return advantages


@register("gigpo")
def gigpo(
    rewards: torch.Tensor,
    mask: torch.Tensor,
    groups: Sequence[str],
    *,
    turn_spans: Sequence[Sequence[Span]] | None = None,
    anchors: Sequence[Sequence[str]] | None = None,
    gamma: float = 1.0,
    step_weight: float = 1.0,
    epsilon: float = 1e-6,
    norm_by_std: bool = True,
    **_: object,
) -> torch.Tensor:
    """A = A^E_i + ω·A^S_ik on the model tokens of turn k of episode i (GiGPO, as its paper
    states it).

    A^E: GRPO over the group on s_i = Σ_t r_it. A^S: `step_group_advantages` of the
    discounted returns R_ik = Σ_{j>=k} γ^(j-k) r_ij, where r_ij sums the token rewards of turn
    j's span [start, end) of response tokens. Without `turn_spans` an episode is one turn
    acting on its group's prompt (a single-turn environment).
    """
    batch, width = rewards.shape
    if turn_spans is None:
        turn_spans = [[(0, width)]] * batch
        anchors = [[""]] * batch
    if anchors is None or [len(a) for a in anchors] != [len(s) for s in turn_spans]:
        raise ValueError("gigpo needs one anchor per turn span, for every episode")
    if len(turn_spans) != batch:
        raise ValueError(f"gigpo got turn spans for {len(turn_spans)} of {batch} episodes")
    step_rewards = [
        [float(rewards[i, start:end].sum()) for start, end in spans]
        for i, spans in enumerate(turn_spans)
    ]
    returns = [discounted_returns(episode, gamma) for episode in step_rewards]
    step = step_group_advantages(returns, anchors, groups, epsilon=epsilon, norm_by_std=norm_by_std)
    episode = group_normalised(rewards.sum(dim=-1), groups, epsilon, norm_by_std)
    advantages = episode[:, None].expand(batch, width).clone()
    for i, spans in enumerate(turn_spans):
        for (start, end), value in zip(spans, step[i], strict=True):
            advantages[i, start:end] += step_weight * value
    return advantages * mask


def group_has_signal(
    estimator: str,
    trajectories: Sequence[Trajectory],
    scores: Sequence[float],
    gamma: float,
    states: dict[str, States] | None = None,
) -> bool:
    """Whether one group's episodes give any non-zero advantage under `estimator`.

    Always when their scores differ; for turn-level estimators (gigpo) also when two turns
    acting on the same anchor have different discounted returns, e.g. an all-solved group
    whose episodes took different numbers of turns, with γ < 1.
    """
    if len(set(scores)) > 1:
        return True
    if estimator not in TURN_LEVEL_ESTIMATORS:
        return False
    returns_by_anchor: dict[str, list[float]] = {}
    for trajectory, score in zip(trajectories, scores, strict=True):
        returns = discounted_returns(turn_step_rewards(trajectory, score), gamma)
        anchors = turn_anchors(trajectory, (states or {}).get(trajectory.env))
        for anchor, value in zip(anchors, returns, strict=True):
            returns_by_anchor.setdefault(anchor, []).append(value)
    return any(
        not math.isclose(min(values), max(values), rel_tol=1e-9, abs_tol=1e-12)
        for values in returns_by_anchor.values()
    )
