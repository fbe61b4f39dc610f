"""Groups whose rewards are all equal learn too (`algorithm.zero_variance_alpha`, RL-ZVP):
signed by their shared outcome, sized by each token's entropy; other groups keep GRPO's."""

from __future__ import annotations

import copy

import pytest
import torch

from agenttrain.config import load
from agenttrain.rl.batch import collate
from agenttrain.rl.config import TrainConfig
from agenttrain.rl.kl import KLController
from agenttrain.rl.logprobs import response_logprobs
from agenttrain.rl.update import PolicyUpdate
from agenttrain.rl.zero_variance import entropy_shaped_advantages, zero_variance_signs
from rl.test_packing import episodes


def played(successes: list[bool]) -> list:
    made = episodes(len(successes))
    for episode, solved in zip(made, successes, strict=True):
        episode.success = solved
    return made


def test_equal_groups_are_signed_by_their_outcome_and_the_rest_are_left_alone():
    group_of = ["a", "a", "b", "b", "c", "c", "d", "d", "e"]
    made = played([True, True, False, False, True, False, True, False, False])
    for episode, group in zip(made, group_of, strict=True):
        episode.group_id = group
    scores = [1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.3, 0.3, 0.0]
    # a: all solved; b: none; c: a spread (GRPO's); d: equal shaped scores, mixed outcomes;
    # e: a group of one
    signs = zero_variance_signs(made, scores)
    assert signs.tolist() == [1.0, 1.0, -1.0, -1.0, 0.0, 0.0, 0.0, 0.0, 0.0]


def test_shaped_advantages_follow_the_entropy_of_each_token():
    advantages = torch.tensor([[0.5, 0.5, 0.5], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    entropy = torch.tensor([[9.0, 9.0, 9.0], [0.2, 1.0, 7.0], [0.2, 1.0, 7.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    signs = torch.tensor([0.0, 1.0, -1.0])
    shaped = entropy_shaped_advantages(advantages, entropy, mask, signs, alpha=0.1)
    expected = torch.tensor(
        [
            [0.5, 0.5, 0.5],  # a group with a spread keeps its advantages
            [0.02, 0.1, 0.0],  # solved: alpha * H, nothing off the mask
            [-0.08, 0.0, 0.0],  # failed: -alpha * (max H on the mask - H)
        ]
    )
    assert torch.allclose(shaped, expected)


def gradient(tiny_model, alpha: float, scores: list[float], successes: list[bool]):
    settings = ["model.path=tiny", "data.batch_tasks=2", "data.group_size=2"]
    settings += ["model.train_dtype=float32", "sampling.temperature=1.0"]
    settings += ["actor.grad_clip=1e9", "algorithm.kl.use_kl_loss=false"]
    settings.append(f"algorithm.zero_variance_alpha={alpha}")
    config = load(TrainConfig, None, settings)
    batch = played(successes)
    with torch.no_grad():
        own, _ = response_logprobs(tiny_model, collate(batch, 0, torch.device("cpu")), 1.0)
    for row, episode in enumerate(batch):
        episode.logprobs = own[row, : len(episode.response_ids)].tolist()
    model = copy.deepcopy(tiny_model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    update = PolicyUpdate(config, model, None, optimizer, KLController(0.0), 0, torch.device("cpu"))
    metrics = update.learn(batch, scores, {})
    grads = [p.grad.flatten() for p in model.parameters() if p.grad is not None]
    return (torch.cat(grads) if grads else torch.zeros(1)), metrics


def test_a_step_of_failed_groups_only_learns_with_the_shaping_and_not_without(tiny_model):
    failed = [0.0, 0.0, 0.0, 0.0]
    plain, _ = gradient(tiny_model, 0.0, failed, [False] * 4)
    assert plain.abs().sum() == 0  # GRPO: every advantage 0, nothing to learn
    shaped, metrics = gradient(tiny_model, 0.1, failed, [False] * 4)
    assert shaped.abs().sum() > 0
    assert metrics["actor/zero_variance_failed_share"] == 1.0
    assert metrics["actor/zero_variance_solved_share"] == 0.0
    assert metrics["actor/pg_loss"] > 0  # negative advantages: the failures are pushed down


def test_groups_with_a_spread_train_exactly_as_grpo_does(tiny_model):
    spread = [1.0, 0.0, 0.0, 1.0]
    plain, _ = gradient(tiny_model, 0.0, spread, [True, False, False, True])
    shaped, metrics = gradient(tiny_model, 0.1, spread, [True, False, False, True])
    assert torch.equal(plain, shaped)
    assert metrics["actor/zero_variance_failed_share"] == 0.0


def test_settings_that_would_drop_or_ignore_the_equal_groups_are_refused():
    with pytest.raises(ValueError, match="filter_groups"):
        load(
            TrainConfig,
            None,
            ["algorithm.zero_variance_alpha=0.1", "algorithm.filter_groups.enabled=true"],
        )
    with pytest.raises(ValueError, match="gigpo"):
        load(
            TrainConfig,
            None,
            ["algorithm.zero_variance_alpha=0.1", "algorithm.adv_estimator=gigpo"],
        )


def test_a_run_with_the_shaping_trains_on_every_group_and_reports_it(tiny_model_dir, tmp_path):
    from rl.tiny_runs import recipe, train

    rows = train(
        recipe(
            tiny_model_dir,
            tmp_path / "run",
            "algorithm.zero_variance_alpha=0.1",
            "trainer.total_steps=1",
            "trainer.test_freq=0",
        )
    )
    step = rows[0]
    assert step["rollout/trained_episodes"] == 16  # no group is set aside
    shaped = step["actor/zero_variance_solved_share"] + step["actor/zero_variance_failed_share"]
    informative = step["rollout/informative_groups"]
    assert shaped == pytest.approx(1 - informative / 4)  # every group without a spread
    report = (tmp_path / "run" / "report.md").read_text()
    assert "shaped: equal and failed" in report
