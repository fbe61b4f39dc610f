"""The trainer optimises what its config says: KL to the starting policy (from an adapter, and
after a resume), unique groups, groups without a baseline dropped, DAPO refill, the
rollout-vs-training probability check, and configs that cannot learn refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from peft import LoraConfig, get_peft_model

from agenttrain.config import ConfigError, load
from agenttrain.envs import EnvSpec, LocalEnvironment, WireProtocol
from agenttrain.envs.largest import SPEC as LARGEST
from agenttrain.envs.registry import register
from agenttrain.rl.config import TrainConfig
from agenttrain.rl.trainer import Trainer
from rl.tiny_runs import RECIPE, train
from rl.tiny_runs import recipe as tiny_recipe


def recipe(model_dir, out_dir, *overrides) -> TrainConfig:
    """One step, no validation, unless overridden."""
    return tiny_recipe(
        model_dir, out_dir, "trainer.total_steps=1", "trainer.test_freq=0", *overrides
    )


@pytest.fixture(scope="module")
def sft_adapter(tiny_model_dir, tokenizer, tmp_path_factory) -> Path:
    """A LoRA adapter that changes the tiny model a lot (a stand-in for an SFT checkpoint)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(1)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.5)
    folder = tmp_path_factory.mktemp("sft-adapter")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_kl_reference_is_the_starting_adapter_not_the_base_model(sft_adapter, tmp_path):
    rows = train(
        recipe(
            sft_adapter,
            tmp_path / "run",
            "algorithm.kl.use_kl_loss=true",
            "algorithm.kl.coef=0.1",
        )
    )
    # Before any update the policy is the starting model: KL to it is 0 (up to the rounding
    # of merged vs adapter weights). The base model under the adapter is far away.
    assert rows[0]["actor/kl_loss"] == pytest.approx(0.0, abs=1e-6)


@pytest.mark.slow  # three runs
def test_full_fine_tuning_kl_after_resume_matches_an_uninterrupted_run(tiny_model_dir, tmp_path):
    settings = (
        "model.lora.enabled=false",
        "algorithm.kl.use_kl_loss=true",
        "algorithm.kl.coef=0.5",
        "actor.lr=1e-3",
        "actor.entropy_coeff=0.05",
        "trainer.save_freq=1",
    )
    whole = train(recipe(tiny_model_dir, tmp_path / "whole", "trainer.total_steps=3", *settings))
    train(recipe(tiny_model_dir, tmp_path / "split", "trainer.total_steps=2", *settings))
    resumed = train(recipe(tiny_model_dir, tmp_path / "split", "trainer.total_steps=3", *settings))
    assert whole[1]["actor/kl_loss"] > 1e-6  # the policy has moved away from the reference
    assert resumed[-1]["step"] == 3
    assert resumed[-1]["actor/kl_loss"] == pytest.approx(whole[2]["actor/kl_loss"], rel=1e-4)


class CrashyLargest(LocalEnvironment):
    """Largest Number whose episodes crash on step for odd (task + sample seed) parity:
    groups thinned by environment errors, some down to one episode."""

    spec = EnvSpec(
        **{
            **{f: getattr(LARGEST, f) for f in LARGEST.__dataclass_fields__},
            "name": "crashy-largest",
            "protocol": WireProtocol(root_text="crashy"),
        }
    )
    calls = 0

    def reset_sync(self, task_id):
        from agenttrain.envs.largest import LargestEnv

        self.inner = LargestEnv()
        CrashyLargest.calls += 1
        self.crash = CrashyLargest.calls % 4 != 0  # three of every four episodes crash
        return self.inner.reset_sync(task_id)

    def step_sync(self, action):
        if self.crash:
            raise RuntimeError("simulator crashed")
        return self.inner.step_sync(action)


def test_groups_left_without_a_baseline_by_env_errors_are_dropped(tiny_model_dir, tmp_path):
    register("crashy-largest", CrashyLargest, replace=True)
    CrashyLargest.calls = 0
    rows = train(
        recipe(
            tiny_model_dir,
            tmp_path / "run",
            "env.name=crashy-largest",
            "trainer.max_env_error_rate=1.0",  # this test is about what survives
        )
    )
    # 16 episodes, 12 crash: every group of 4 keeps one episode, which has no baseline.
    assert rows[0]["rollout/env_error_episodes"] == 12
    assert rows[0]["rollout/dropped_groups_env_error"] == 4
    assert rows[0]["rollout/trained_episodes"] == 0


def test_the_same_task_twice_in_a_step_makes_two_groups_with_their_own_seeds(
    tiny_model_dir, tmp_path
):
    # A 4-task split played 3 tasks a step: step 2 crosses the epoch boundary and may draw a
    # task again; slots, not tasks, name groups.
    config = recipe(
        tiny_model_dir,
        tmp_path / "run",
        "data.batch_tasks=8",
        "data.group_size=2",
        "env.split=val",
    )
    trainer = Trainer(config)
    del trainer.environments.parts[0].train_tasks[4:]
    trainer.train_step(1)
    episodes = [
        line
        for line in (tmp_path / "run" / "trajectories" / "step-000001.jsonl")
        .read_text()
        .splitlines()
    ]
    import json

    rows = [json.loads(line) for line in episodes]
    tasks = [r["task_id"] for r in rows]
    assert len(set(tasks)) == 4 and len(tasks) == 16  # every task twice (8 slots over 4 tasks)
    assert len({r["group_id"] for r in rows}) == 8
    for task in set(tasks):
        seeds = {r["seed"] for r in rows if r["task_id"] == task}
        assert len(seeds) == 2  # the two groups of one task sample differently


def test_dynamic_sampling_refills_the_batch_with_informative_groups(tiny_model_dir, tmp_path):
    rows = train(
        recipe(
            tiny_model_dir,
            tmp_path / "run",
            "algorithm.filter_groups.enabled=true",
            "algorithm.filter_groups.max_num_gen_batches=6",
            "data.batch_tasks=2",
            "sampling.temperature=2.0",
        )
    )
    row = rows[0]
    informative = row["rollout/informative_groups"]
    rounds = row["train/num_gen_batches"]
    assert rounds >= 1
    # Either the batch was refilled to 2 informative groups, or all 6 rounds were spent.
    assert row["rollout/trained_groups"] == min(informative, 2)
    assert informative >= 2 or rounds == 6
    assert row["rollout/episodes"] == rounds * 2 * 4
    assert row["rollout/trained_episodes"] == 4 * row["rollout/trained_groups"]


def test_rollout_and_training_probabilities_are_compared_every_update(tiny_model_dir, tmp_path):
    for extra in ((), ("actor.ppo_epochs=2",)):
        rows = train(recipe(tiny_model_dir, tmp_path / f"run{len(extra)}", *extra))
        assert 0 <= rows[0]["training/rollout_probs_diff_mean"] < 1e-3
        assert rows[0]["training/rollout_probs_diff_max"] < 1e-2


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("data.group_size=1",), "cannot learn with data.group_size=1"),
        (
            (
                "data.group_size=1",
                "algorithm.adv_estimator=reinforce_plus_plus_baseline",
                "algorithm.filter_groups.enabled=true",
            ),
            "no group can",
        ),
        (("algorithm.return_at_env_tokens=restart",), "reinforce_plus_plus only"),
    ],
)
def test_configs_that_cannot_learn_are_refused(tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message):
        load(TrainConfig, RECIPE, list(overrides))


def test_training_on_test_tasks_is_refused(tiny_model_dir, tmp_path):
    from agenttrain.serving.task_map import TaskOverlap

    with pytest.raises(TaskOverlap, match="test"):
        Trainer(recipe(tiny_model_dir, tmp_path / "run", "env.split=test"))
    with pytest.raises(TaskOverlap, match="test textcraft tasks are also trained on"):
        Trainer(recipe(tiny_model_dir, tmp_path / "tc", "env.name=textcraft", "env.split=test"))
