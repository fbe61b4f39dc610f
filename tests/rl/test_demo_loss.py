"""GRPO's demonstration loss (`actor.demo_loss`): the SFT's own conversations, trained on in
every optimizer step beside the policy loss, refused when they hold test tasks."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from agenttrain.config import ConfigError, load
from agenttrain.policy.chat import ChatTemplate
from agenttrain.rl.config import DemoLossConfig, TrainConfig
from agenttrain.rl.demo_loss import DemoLoss, load_demonstrations
from agenttrain.sft.data import DataError
from agenttrain.sft.guard import HeldOutLeak
from agenttrain.sft.loss import nll_sums
from agenttrain.sft.trainer import SFTTrainer
from rl.test_packing import episodes
from rl.tiny_runs import recipe, train, update_gradient
from sft.conftest import write_demos
from sft.test_trainer import recipe as sft_recipe


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    return write_demos(tmp_path_factory.mktemp("demos"), "react")


def loss_config(demos, **fields) -> DemoLossConfig:
    return DemoLossConfig(coef=fields.pop("coef", 1.0), data=[demos], **fields)


def test_it_trains_on_the_conversations_the_sft_run_of_the_same_seed_trained_on(
    demos, tiny_model_dir, tokenizer, tmp_path
):
    """`limit` draws the SFT's seeded sample: GRPO's anchor is the SFT's own data, not
    demonstrations the SFT never saw (a confound: more demonstrations alone add points)."""
    sft = SFTTrainer(
        sft_recipe(
            demos, tiny_model_dir, tmp_path, "data.limit=5", "data.eval_fraction=0", "run.seed=3"
        )
    )
    template = ChatTemplate(tokenizer, None)
    ours = load_demonstrations(loss_config(demos, limit=5), template, ["textcraft"], 3)
    assert [e.source for e in ours] == [e.source for e in sft.train_examples]
    assert [e.ids for e in ours] == [e.ids for e in sft.train_examples]
    other_seed = load_demonstrations(loss_config(demos, limit=5), template, ["textcraft"], 4)
    assert [e.source for e in other_seed] != [e.source for e in ours]


def test_each_update_draws_a_seeded_sample_a_resumed_run_draws_again(demos, tokenizer):
    loss = DemoLoss(loss_config(demos, per_update=3), ChatTemplate(tokenizer, None), [], 0, 0)
    first = [e.source for e in loss.sample(step=2, mini_batch=0)]
    assert len(first) == 3
    assert [e.source for e in loss.sample(step=2, mini_batch=0)] == first
    assert [e.source for e in loss.sample(step=3, mini_batch=0)] != first


def test_demonstrations_of_test_tasks_are_refused(tmp_path, tokenizer):
    from agenttrain.envs import get_spec

    test_task = get_spec("textcraft").splits()["test"][0]
    leak = tmp_path / "leak.jsonl"
    record = {
        "env": "textcraft",
        "task_id": test_task,
        "messages": [{"role": "user", "content": "go"}, {"role": "assistant", "content": "ok"}],
    }
    leak.write_text(json.dumps(record) + "\n")
    with pytest.raises(HeldOutLeak, match=r"leak\.jsonl:1"):
        load_demonstrations(loss_config(leak), ChatTemplate(tokenizer, None), ["textcraft"], 0)


def test_a_missing_file_and_a_weight_without_data_are_clear_errors(tmp_path, tokenizer):
    with pytest.raises(DataError, match="no such data file"):
        load_demonstrations(
            loss_config(tmp_path / "none.jsonl"), ChatTemplate(tokenizer, None), [], 0
        )
    with pytest.raises(ConfigError, match="needs demonstrations"):
        load(TrainConfig, None, ["actor.demo_loss.coef=0.5"])


def gradients(tiny_model, demo_loss: DemoLoss | None) -> tuple[torch.Tensor, dict]:
    overrides = [
        "model.train_dtype=float32",
        "actor.grad_clip=1e9",
        "algorithm.kl.use_kl_loss=false",
    ]
    # equal rewards in each group: no reward variance, no policy gradient
    return update_gradient(tiny_model, overrides, episodes(), [1.0, 1.0, 0.0, 0.0], demos=demo_loss)


def test_a_step_without_policy_signal_still_learns_the_demonstrations(demos, tiny_model, tokenizer):
    """Every group's rewards are equal, so the policy loss has no gradient; the demonstration
    loss still pulls towards the demonstrations, by exactly coef x the gradient of their NLL."""
    plain, _ = gradients(tiny_model, None)
    assert plain.abs().sum() == 0
    template = ChatTemplate(tokenizer, None)
    anchored, metrics = gradients(
        tiny_model, DemoLoss(loss_config(demos, coef=0.5, per_update=4), template, [], 0, 0)
    )
    assert anchored.abs().sum() > 0
    chosen = DemoLoss(loss_config(demos, per_update=4), template, [], 0, 0).sample(
        step=1, mini_batch=0
    )
    reference = copy.deepcopy(tiny_model)
    config = load(TrainConfig, None, ["model.path=tiny", "model.train_dtype=float32"])
    loss_sum, tokens = nll_sums(reference, chosen, config.model, 2048, False, 0, 0.5)
    expected = torch.cat([p.grad.flatten() for p in reference.parameters() if p.grad is not None])
    assert torch.allclose(anchored, expected, atol=1e-6, rtol=1e-4)
    assert metrics["actor/demo_nll"] == pytest.approx(loss_sum / tokens, rel=1e-5)


def test_a_training_run_logs_the_demonstrations_loss(demos, tiny_model_dir, tmp_path):
    rows = train(
        recipe(
            tiny_model_dir,
            tmp_path / "run",
            "trainer.total_steps=1",
            "trainer.test_freq=0",
            "actor.demo_loss.coef=0.5",
            f"actor.demo_loss.data=[{demos}]",
            "actor.demo_loss.per_update=2",
        )
    )
    step = next(row for row in rows if "actor/pg_loss" in row)
    assert step["actor/demo_nll"] > 0
    report = (tmp_path / "run" / "report.md").read_text()
    assert "demonstrations' NLL" in report
