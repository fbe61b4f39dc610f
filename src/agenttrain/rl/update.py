"""One GRPO policy update: log-probs, rewards with KL, advantages, PPO passes over micro-batches.

Separate from the trainer's orchestration (rollouts, logging, checkpoints): this is the part
that applies the formulas of `advantages.py`, `losses.py` and `kl.py` to a batch of episodes.
"""

from __future__ import annotations

import math
from statistics import fmean
from typing import Any

import torch

from agenttrain.modeling import autocast
from agenttrain.rl.advantages import (
    TURN_LEVEL_ESTIMATORS,
    States,
    get_estimator,
    turn_anchors,
    turn_step_rewards,
)
from agenttrain.rl.batch import EpisodeBatch, collate, micro_batches, pad_responses
from agenttrain.rl.config import TrainConfig
from agenttrain.rl.demo_loss import DemoLoss
from agenttrain.rl.kl import KLController, kl_penalty
from agenttrain.rl.logprobs import response_logprobs
from agenttrain.rl.losses import Totals, agg_loss, ppo_clip_loss
from agenttrain.rl.rollout_correction import importance_weights
from agenttrain.rl.stats import stats, timed
from agenttrain.rl.zero_variance import entropy_shaped_advantages, zero_variance_signs
from agenttrain.rollout.trajectory import Trajectory


class PolicyUpdate:
    """Holds what an update needs: the model, its reference, the optimizer, the KL controller."""

    def __init__(
        self,
        config: TrainConfig,
        model: torch.nn.Module,
        reference: torch.nn.Module | None,
        optimizer: torch.optim.Optimizer,
        kl_ctrl: KLController,
        pad_id: int,
        device: torch.device,
        states: dict[str, States] | None = None,
        demos: DemoLoss | None = None,
    ) -> None:
        self.config = config
        self.demos = demos
        """The demonstration loss added to every optimizer step (`actor.demo_loss`), if on."""
        self.states = states or {}
        """Per environment, the states GiGPO anchors on (`algorithm.gigpo.anchor=state`)."""
        self.model = model
        self.reference = reference
        self.optimizer = optimizer
        self.params = [p for group in optimizer.param_groups for p in group["params"]]
        self.kl_ctrl = kl_ctrl
        self.pad_id = pad_id
        self.device = device

    def _collate(self, episodes: list[Trajectory]) -> EpisodeBatch:
        return collate(episodes, self.pad_id, self.device, self.config.actor.packing)

    def _autocast(self) -> Any:
        return autocast(self.config.model)

    @property
    def on_policy_shortcut(self) -> bool:
        """One PPO epoch over one mini-batch: the update's forward pass sees exactly the old
        weights, so its (detached) log-probs are the old log-probs; no separate pass."""
        actor = self.config.actor
        episodes = self.config.data.batch_tasks * self.config.data.group_size
        return actor.ppo_epochs == 1 and (actor.mini_batch_episodes or episodes) >= episodes

    def _logprobs(
        self, model: torch.nn.Module, episodes: list[Trajectory], with_entropy: bool
    ) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
        """Per-episode log-probs (and entropies) of response tokens, without gradients."""
        temperature = self.config.sampling.temperature
        logprobs: list[torch.Tensor] = []
        entropies: list[torch.Tensor] = []
        lengths = [len(t.prompt_ids) + len(t.response_ids) for t in episodes]
        with torch.no_grad(), self._autocast():
            for micro in micro_batches(lengths, self.config.actor.micro_batch_tokens):
                batch = self._collate([episodes[i] for i in micro])
                values, entropy = response_logprobs(model, batch, temperature, with_entropy)
                for row, index in enumerate(micro):
                    width = len(episodes[index].response_ids)
                    logprobs.append(values[row, :width].float().cpu())
                    if entropy is not None:
                        entropies.append(entropy[row, :width].float().cpu())
        return logprobs, entropies if with_entropy else None

    def _reference_logprobs(self, episodes: list[Trajectory]) -> list[torch.Tensor]:
        if self.reference is not None:
            return self._logprobs(self.reference, episodes, False)[0]
        with self.model.disable_adapter():  # LoRA: the base model is the reference
            return self._logprobs(self.model, episodes, False)[0]

    def learn(
        self,
        episodes: list[Trajectory],
        scores: list[float],
        timing: dict[str, float],
        step: int = 0,
    ) -> dict[str, float]:
        """Update the policy on a step's episodes; `step` seeds the demonstrations sampled."""
        config, actor, kl = self.config, self.config.actor, self.config.algorithm.kl
        metrics: dict[str, float] = {}
        width = max(len(t.response_ids) for t in episodes)
        mask = pad_responses([t.response_mask for t in episodes], width)
        guided = guided_rows(episodes)
        # Rollout log-probs of episodes played with experience were taken with the block in
        # the prompt: they are left out of the rollout-vs-training comparison.
        plain_mask = mask * (~guided).float().unsqueeze(-1)
        if self.config.memory.enabled:
            guided_tokens = float((mask * guided.float().unsqueeze(-1)).sum())
            metrics["actor/exp_mask_ratio"] = guided_tokens / max(float(mask.sum()), 1.0)
        old_logprobs = None  # None: the update's own forward pass provides them
        needs_old = kl.in_reward or not (actor.recompute_old_logprobs and self.on_policy_shortcut)
        if needs_old:
            with timed(timing, "old_log_prob"):
                if actor.recompute_old_logprobs:
                    old = self._logprobs(self.model, episodes, with_entropy=False)[0]
                else:
                    old = [torch.tensor(t.logprobs) for t in episodes]
            old_logprobs = pad_responses(old, width)
        rollout_logprobs = pad_responses([t.logprobs for t in episodes], width)
        if old_logprobs is not None:
            metrics.update(rollout_probs_diff([(rollout_logprobs, old_logprobs, plain_mask)]))
        ref_logprobs = None
        if kl.use_kl_loss or kl.in_reward:
            with timed(timing, "ref"):
                ref_logprobs = pad_responses(self._reference_logprobs(episodes), width)
        turn_level = config.algorithm.adv_estimator in TURN_LEVEL_ESTIMATORS
        if turn_level:
            rewards = turn_rewards(episodes, scores, mask)
        else:
            rewards = outcome_rewards(scores, mask)
        if kl.in_reward and ref_logprobs is not None and old_logprobs is not None:
            penalty = kl_penalty(old_logprobs, ref_logprobs, kl.in_reward_type) * mask
            rewards = rewards - self.kl_ctrl.value * penalty
            current = float((penalty.sum(-1) / mask.sum(-1).clamp(min=1)).mean())
            metrics["actor/reward_kl_penalty"] = current
            metrics["actor/reward_kl_penalty_coeff"] = self.kl_ctrl.value
            self.kl_ctrl.update(current, len(episodes))
        metrics.update(stats("critic/rewards", rewards.sum(-1).tolist()))
        with timed(timing, "adv"):
            estimator = get_estimator(config.algorithm.adv_estimator)
            advantages = estimator(
                rewards,
                mask,
                [t.group_id for t in episodes],
                epsilon=config.algorithm.epsilon,
                norm_by_std=config.algorithm.norm_adv_by_std,
                gamma=config.algorithm.gamma,
                env_tokens=config.algorithm.return_at_env_tokens,
                step_weight=config.algorithm.gigpo.step_weight,
                **(turn_structure(episodes, self.states) if turn_level else {}),
            )
        token_advantages = advantages[mask.bool()]
        if len(token_advantages):
            metrics.update(stats("critic/advantages", token_advantages.tolist()))
        signs = None
        if config.algorithm.zero_variance_alpha > 0:
            signs = zero_variance_signs(episodes, scores)
            metrics["actor/zero_variance_solved_share"] = float((signs > 0).float().mean())
            metrics["actor/zero_variance_failed_share"] = float((signs < 0).float().mean())
        with timed(timing, "update_actor"):
            metrics.update(
                self._update(
                    episodes,
                    mask,
                    old_logprobs,
                    ref_logprobs,
                    advantages,
                    rollout_logprobs,
                    old_logprobs is None,
                    guided,
                    signs,
                    step,
                )
            )
        return metrics

    def _update(
        self,
        episodes: list[Trajectory],
        mask: torch.Tensor,
        old_logprobs: torch.Tensor | None,
        ref_logprobs: torch.Tensor | None,
        advantages: torch.Tensor,
        rollout_logprobs: torch.Tensor,
        compare_here: bool,
        guided: torch.Tensor,
        signs: torch.Tensor | None,
        step: int,
    ) -> dict[str, float]:
        """`ppo_epochs` passes over mini-batches; each optimizer step accumulates micro-batches.

        `compare_here`: the old log-probs come from the update's own forward pass (one epoch,
        one mini-batch), so the rollout-vs-training comparison is made there. `signs`: the
        rows of all-equal groups whose advantages are entropy-shaped (`rl/zero_variance.py`).
        With a demonstration loss, each optimizer step adds its gradients before clipping.
        """
        actor, kl = self.config.actor, self.config.algorithm.kl
        scale_factor = actor.loss_scale_factor or self.config.rollout.max_context
        compared: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        temperature = self.config.sampling.temperature
        size = actor.mini_batch_episodes or len(episodes)
        lengths = [len(t.prompt_ids) + len(t.response_ids) for t in episodes]
        history: dict[str, list[float]] = {}
        starts = range(0, len(episodes), size)
        for epoch in range(actor.ppo_epochs):
            for number, start in enumerate(starts):
                indices = list(range(start, min(start + size, len(episodes))))
                sub_mask = mask[indices]
                totals = Totals(
                    tokens=int(sub_mask.sum()),
                    sequences=int((sub_mask.sum(-1) > 0).sum()),
                    loss_scale_factor=scale_factor,
                )
                self.optimizer.zero_grad(set_to_none=True)
                sums: dict[str, float] = {}
                for micro in micro_batches([lengths[i] for i in indices], actor.micro_batch_tokens):
                    rows = [indices[i] for i in micro]
                    if not any(episodes[row].response_ids for row in rows):
                        continue  # nothing the model wrote (each hit the context limit at once)
                    parts, logprobs = self._micro_step(
                        episodes,
                        rows,
                        mask,
                        old_logprobs,
                        ref_logprobs,
                        advantages,
                        totals,
                        temperature,
                        guided,
                        rollout_logprobs,
                        signs,
                    )
                    if compare_here:
                        width = logprobs.shape[1]
                        plain = mask[rows, :width] * (~guided[rows]).float().unsqueeze(-1)
                        compared.append((rollout_logprobs[rows, :width], logprobs, plain))
                    for key, value in parts.items():
                        sums[key] = sums.get(key, 0.0) + value
                if self.demos is not None:
                    sums["actor/demo_nll"] = self.demos.backward(
                        self.model,
                        self.config.model,
                        actor.micro_batch_tokens,
                        actor.packing,
                        step,
                        epoch * len(starts) + number,
                    )
                grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, actor.grad_clip))
                if math.isfinite(grad_norm):
                    self.optimizer.step()
                else:
                    sums["actor/skipped_updates"] = 1.0
                sums["actor/grad_norm"] = grad_norm
                for key, value in sums.items():
                    history.setdefault(key, []).append(value)
        metrics = {key: fmean(values) for key, values in history.items()}
        if compared:
            metrics.update(rollout_probs_diff(compared))
        if kl.use_kl_loss:
            metrics["actor/kl_coef"] = kl.coef
        return metrics

    def _clip_high(self, guided: torch.Tensor) -> torch.Tensor:
        """[B, 1] upper clip per episode: `memory.off_clip_ratio_high` for episodes played with
        experience (their actions came from another context), `actor.clip_ratio_high` else."""
        off = self.config.memory.off_clip_ratio_high
        on = self.config.actor.clip_ratio_high
        return torch.where(guided, off, on).float().unsqueeze(-1)

    def _rollout_weights(
        self, old: torch.Tensor, rollout: torch.Tensor, mask: torch.Tensor, share: float
    ) -> tuple[torch.Tensor | None, dict[str, float]]:
        """TIS weights (`algorithm.rollout_correction`) and their share of the step's metrics;
        no weights when it is off."""
        correction = self.config.algorithm.rollout_correction
        if correction.level is None:
            return None, {}
        tis = importance_weights(old, rollout, mask, correction.level, correction.threshold)
        return tis.weights, {
            "training/rollout_is_weight_mean": tis.mean * share,
            "training/rollout_is_truncated": tis.truncated * share,
        }

    def _micro_step(
        self,
        episodes: list[Trajectory],
        rows: list[int],
        mask: torch.Tensor,
        old_logprobs: torch.Tensor | None,
        ref_logprobs: torch.Tensor | None,
        advantages: torch.Tensor,
        totals: Totals,
        temperature: float,
        guided: torch.Tensor,
        behaviour: torch.Tensor,
        signs: torch.Tensor | None,
    ) -> tuple[dict[str, float], torch.Tensor]:
        """Forward and backward one micro-batch; returns its share of the step's metrics and
        its (detached) log-probs.

        Losses are normalised by the mini-batch totals, so micro-batch losses add up to the
        mini-batch loss (and so do the per-token metrics, weighted by their token share).
        """
        actor, kl = self.config.actor, self.config.algorithm.kl
        batch = self._collate([episodes[i] for i in rows])
        width = batch.response_mask.shape[1]
        micro_mask = mask[rows, :width].to(self.device)
        with self._autocast():  # the entropy is a loss term only with a coefficient
            logprobs, entropy = response_logprobs(
                self.model, batch, temperature, True, entropy_grad=actor.entropy_coeff > 0
            )
        logprobs = logprobs.float()
        assert entropy is not None
        entropy = entropy.float()
        if old_logprobs is None:
            old = logprobs.detach()
        else:
            old = old_logprobs[rows, :width].to(self.device)
        rollout = behaviour[rows, :width].to(self.device)
        if guided[rows].any():
            old = off_policy_old(old, rollout, guided[rows])
        share = float(micro_mask.sum()) / max(totals.tokens, 1)
        weights, parts = self._rollout_weights(old, rollout, micro_mask, share)
        micro_advantages = advantages[rows, :width].to(self.device)
        if signs is not None:
            micro_advantages = entropy_shaped_advantages(
                micro_advantages,
                entropy,
                micro_mask,
                signs[rows],
                self.config.algorithm.zero_variance_alpha,
            )
        policy = ppo_clip_loss(
            logprobs,
            old,
            micro_advantages,
            micro_mask,
            clip_low=actor.clip_ratio_low,
            clip_high=self._clip_high(guided[rows]).to(self.device),
            clip_c=actor.clip_ratio_c,
            agg_mode=actor.loss_agg_mode,
            totals=totals,
            weights=weights,
        )
        loss = policy.loss
        parts |= {
            "actor/pg_loss": float(policy.loss.detach()),
            "actor/pg_clipfrac": float(policy.clipfrac) * share,
            "actor/pg_clipfrac_lower": float(policy.clipfrac_lower) * share,
            "actor/ppo_kl": float(policy.ppo_kl) * share,
            "actor/entropy": float(agg_loss(entropy.detach(), micro_mask, "token-mean", totals)),
        }
        if actor.entropy_coeff > 0:
            entropy_loss = agg_loss(entropy, micro_mask, actor.loss_agg_mode, totals)
            loss = loss - actor.entropy_coeff * entropy_loss
            parts["actor/entropy_loss"] = float(entropy_loss.detach())
        if kl.use_kl_loss and ref_logprobs is not None:
            reference = ref_logprobs[rows, :width].to(self.device)
            kl_value = agg_loss(
                kl_penalty(logprobs, reference, kl.type), micro_mask, actor.loss_agg_mode, totals
            )
            loss = loss + kl.coef * kl_value
            parts["actor/kl_loss"] = float(kl_value.detach())
        loss.backward()
        parts["actor/loss"] = float(loss.detach())
        return parts, logprobs.detach().cpu()


def off_policy_old(
    old: torch.Tensor, behaviour: torch.Tensor, guided: torch.Tensor
) -> torch.Tensor:
    """Old log-probs with the behaviour policy's for episodes played with experience.

    Their actions were sampled from mu(a | x + experience), the rollout's log-probs; training
    sees x alone, so the importance ratio is pi(a | x) / mu(a | x + experience) and the
    off-policy clip (`memory.off_clip_ratio_high`) bounds it. Recomputed old log-probs
    (x alone) made that ratio exactly 1 in a one-epoch update: the clip never acted (issue 23).
    """
    return torch.where(guided.to(old.device).unsqueeze(-1), behaviour, old)


def guided_rows(episodes: list[Trajectory]) -> torch.Tensor:
    """[B] bool: which episodes were played with experience (AgentEvolver's exp_mask rows)."""
    return torch.tensor([t.experience is not None for t in episodes], dtype=torch.bool)


def outcome_rewards(scores: list[float], mask: torch.Tensor) -> torch.Tensor:
    """Token rewards with each episode's score on its last model token."""
    rewards = torch.zeros(mask.shape)
    for row, score in enumerate(scores):
        model_positions = mask[row].nonzero()
        if len(model_positions):
            rewards[row, int(model_positions[-1])] = score
    return rewards


def turn_rewards(
    episodes: list[Trajectory], scores: list[float], mask: torch.Tensor
) -> torch.Tensor:
    """Token rewards with each turn's step reward (`turn_step_rewards`, adding up to the
    score) on the turn's last model token. A turn without model tokens hands its reward to
    the closest earlier model token, else to the episode's last one."""
    rewards = torch.zeros(mask.shape)
    for row, (episode, score) in enumerate(zip(episodes, scores, strict=True)):
        model_positions = mask[row].nonzero().flatten()
        if not len(model_positions):
            continue
        step_rewards = turn_step_rewards(episode, score)
        for (_, end), reward in zip(_spans(episode), step_rewards, strict=True):
            before = model_positions[model_positions < end]
            position = before[-1] if len(before) else model_positions[-1]
            rewards[row, int(position)] += reward
    return rewards


def turn_structure(
    episodes: list[Trajectory], states: dict[str, States] | None = None
) -> dict[str, Any]:
    """What turn-level estimators need: each turn's token span and anchor text (the
    observation, or the state where `states` has the episode's environment)."""
    states = states or {}
    return {
        "turn_spans": [_spans(episode) for episode in episodes],
        "anchors": [turn_anchors(episode, states.get(episode.env)) for episode in episodes],
    }


def _spans(episode: Trajectory) -> list[tuple[int, int]]:
    spans = [turn.token_span for turn in episode.turns]
    if any(span is None for span in spans):
        raise ValueError(
            f"episode {episode.episode_id} has no per-turn token spans (played by a text "
            "policy, or recorded before spans were kept): turn-level advantages need them"
        )
    return [span for span in spans if span is not None]


def rollout_probs_diff(
    pairs: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
) -> dict[str, float]:
    """|p_rollout - p_train| over model tokens (verl's `training/rollout_probs_diff_*`).

    Each pair holds the rollout's log-probs, the training weights' log-probs of the same
    tokens and the mask. A large value means generation and training disagree (another
    precision, a tokenization mismatch, stale weights), which makes the PPO ratio wrong.
    """
    diffs = torch.cat(
        [(rollout.exp() - train.exp()).abs()[mask.bool()] for rollout, train, mask in pairs]
    )
    if diffs.numel() == 0:
        return {}
    return {
        "training/rollout_probs_diff_mean": float(diffs.mean()),
        "training/rollout_probs_diff_max": float(diffs.max()),
        "training/rollout_probs_diff_std": float(diffs.std()) if diffs.numel() > 1 else 0.0,
    }
