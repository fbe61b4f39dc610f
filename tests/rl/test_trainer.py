"""The trainer on the tiny model: metrics, KL, failures, dynamic sampling, checkpoints, export."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from agenttrain.envs import EnvSpec, LocalEnvironment, WireProtocol
from agenttrain.envs.largest import SPEC as LARGEST
from agenttrain.envs.registry import register
from agenttrain.rl.config import TurnsStage
from agenttrain.rl.curriculum import max_turns_at
from agenttrain.rl.export import export
from agenttrain.rl.trainer import Trainer
from agenttrain.run import checkpoint
from agenttrain.run.checkpoint import CheckpointError
from agenttrain.run.tracking import read_metrics
from rl.tiny_runs import deep_textcraft_step, recipe, train


def test_a_run_logs_verl_metrics_and_writes_a_complete_run_folder(tiny_model_dir, tmp_path):
    rows = train(recipe(tiny_model_dir, tmp_path / "run"))
    assert [row["step"] for row in rows] == [0, 1, 2]
    assert "val/success_rate" in rows[0] and "val/success_rate" in rows[2]
    for key in (
        "critic/score/mean",
        "critic/advantages/mean",
        "actor/pg_loss",
        "actor/entropy",
        "actor/grad_norm",
        "actor/lr",
        "response_length/mean",
        "num_turns/mean",
        "timing_s/gen",
        "timing_s/update_actor",
        "timing_s/step",
        "perf/throughput",
        "rollout/env_error_episodes",
        "training/global_step",
    ):
        assert key in rows[1], key
    run = tmp_path / "run"
    assert (run / "config.yaml").exists() and (run / "report.md").exists()
    assert (run / "training.png").stat().st_size > 10_000
    assert len(list((run / "trajectories").glob("step-*.jsonl"))) == 2
    newest = checkpoint.latest(run)
    assert newest == run / "checkpoints" / "step-2"
    assert (newest / "model" / "adapter_config.json").exists()
    assert json.loads((newest / "model" / "agenttrain.json").read_text())["step"] == 2


def test_kl_to_the_reference_is_zero_at_the_first_step(tiny_model_dir, tmp_path):
    rows = train(
        recipe(
            tiny_model_dir,
            tmp_path / "run",
            "algorithm.kl.use_kl_loss=true",
            "algorithm.kl.coef=0.1",
            "trainer.test_freq=0",
            "actor.entropy_coeff=0.05",
        )
    )
    assert rows[0]["actor/kl_loss"] == 0.0  # LoRA starts as the identity: policy == reference
    assert rows[1]["actor/kl_loss"] > 0.0  # after one update they differ


def test_full_fine_tuning_uses_a_frozen_reference_copy(tiny_model_dir, tmp_path):
    config = recipe(
        tiny_model_dir,
        tmp_path / "run",
        "model.lora.enabled=false",
        "algorithm.kl.use_kl_loss=true",
        "trainer.total_steps=1",
        "trainer.test_freq=0",
        "actor.entropy_coeff=0.05",
    )
    trainer = Trainer(config)
    assert trainer.reference is not None
    before = {k: v.clone() for k, v in trainer.reference.state_dict().items()}
    trainer.train()
    rows = read_metrics(config.run.out_dir / "metrics.jsonl")
    assert rows[0]["actor/kl_loss"] == 0.0
    assert all(torch.equal(before[k], v) for k, v in trainer.reference.state_dict().items())
    changed = AutoModelForCausalLM.from_pretrained(checkpoint.latest(config.run.out_dir) / "model")
    original = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert not torch.equal(changed.lm_head.weight, original.lm_head.weight)


class FlakyLargest(LocalEnvironment):
    """Largest Number whose odd tasks crash on step: env errors must not become rewards."""

    spec = EnvSpec(
        **{
            **{f: getattr(LARGEST, f) for f in LARGEST.__dataclass_fields__},
            "name": "flaky-largest",
            "protocol": WireProtocol(root_text="flaky"),
        }
    )

    def reset_sync(self, task_id):
        from agenttrain.envs.largest import LargestEnv

        self.inner, self.task = LargestEnv(), task_id
        return self.inner.reset_sync(task_id)

    def step_sync(self, action):
        if self.task % 2:
            raise RuntimeError("simulator crashed")
        return self.inner.step_sync(action)


def test_environment_errors_are_excluded_from_training_and_counted(tiny_model_dir, tmp_path):
    register("flaky-largest", FlakyLargest, replace=True)
    config = recipe(
        tiny_model_dir,
        tmp_path / "run",
        "env.name=flaky-largest",
        "trainer.total_steps=1",
        "trainer.test_freq=0",
    )
    trainer = Trainer(config)
    odd_groups = sum(trainer.task_at(slot) % 2 for slot in range(4))
    odd = odd_groups * 4
    rows = train(config)
    assert rows[0]["rollout/env_error_episodes"] == odd
    assert rows[0]["rollout/dropped_groups_env_error"] == odd_groups
    assert rows[0]["rollout/trained_episodes"] == 16 - odd
    episodes = [
        json.loads(line)
        for line in (tmp_path / "run" / "trajectories" / "step-000001.jsonl")
        .read_text()
        .splitlines()
    ]
    assert sum(e["reward"] is None for e in episodes) == odd


def test_dynamic_sampling_drops_groups_without_reward_variance(tiny_model_dir, tmp_path):
    rows = train(
        recipe(
            tiny_model_dir,
            tmp_path / "run",
            "algorithm.filter_groups.enabled=true",
            "algorithm.filter_groups.max_num_gen_batches=1",  # no refill: see test_objective
            "trainer.total_steps=1",
            "trainer.test_freq=0",
        )
    )
    filtered = rows[0]["rollout/filtered_groups"]
    assert filtered >= 1  # the random model rarely answers right: most groups are all zero
    assert rows[0]["rollout/trained_episodes"] == 16 - 4 * filtered


def test_a_step_without_a_learning_signal_says_so_on_the_terminal(tiny_model_dir, tmp_path):
    """Issue 28: only the report showed it; the progress line said 'updating on 0 episodes'."""
    from io import StringIO

    from rich.console import Console

    reward_file = tmp_path / "flat.py"
    reward_file.write_text("def compute_score(**_):\n    return 0.0\n")  # no group varies
    config = recipe(
        tiny_model_dir,
        tmp_path / "run",
        f"reward.custom_function.path={reward_file}",
        "algorithm.filter_groups.enabled=true",
        "algorithm.filter_groups.max_num_gen_batches=1",
        "trainer.total_steps=1",
        "trainer.test_freq=0",
    )
    shown = StringIO()
    Trainer(config, console=Console(file=shown, width=200)).train()
    assert "step 1: no update: no group with a learning signal (0 informative, 0 dropped for " in (
        shown.getvalue()
    )


def test_custom_reward_functions_use_verls_signature(tiny_model_dir, tmp_path):
    reward_file = tmp_path / "reward.py"
    reward_file.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info, bonus=0.0):\n"
        "    assert data_source == 'largest' and 'task_id' in extra_info\n"
        "    return {'score': 0.25 + bonus, 'length': float(len(solution_str))}\n"
    )
    rows = train(
        recipe(
            tiny_model_dir,
            tmp_path / "run",
            f"reward.custom_function.path={reward_file}",
            "reward.custom_function.kwargs={bonus: 0.5}",
            "trainer.total_steps=1",
            "trainer.test_freq=0",
        )
    )
    assert rows[0]["critic/score/mean"] == pytest.approx(0.75)
    assert rows[0]["reward_extra/length"] > 0


def test_reward_extras_average_every_round_of_a_step(tiny_model_dir, tmp_path):
    """They were the last generation round's alone when dynamic sampling drew a second one."""
    reward_file = tmp_path / "counting.py"
    reward_file.write_text(
        "calls = 0\n"
        "def compute_score(**_):\n"
        "    global calls\n"
        "    calls += 1\n"
        "    return {'score': 0.0, 'call': float(calls)}\n"  # no variance: a second round
    )
    rows = train(
        recipe(
            tiny_model_dir,
            tmp_path / "run",
            f"reward.custom_function.path={reward_file}",
            "algorithm.filter_groups.enabled=true",
            "algorithm.filter_groups.max_num_gen_batches=2",
            "trainer.total_steps=1",
            "trainer.test_freq=0",
        )
    )
    assert rows[0]["train/num_gen_batches"] == 2
    assert rows[0]["reward_extra/call"] == pytest.approx(16.5)  # calls 1..32, not 17..32


def test_only_the_newest_checkpoints_are_kept(tiny_model_dir, tmp_path):
    train(
        recipe(
            tiny_model_dir,
            tmp_path / "run",
            "trainer.total_steps=3",
            "trainer.save_freq=1",
            "trainer.keep_checkpoints=2",
            "trainer.test_freq=0",
        )
    )
    kept = sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("step-*"))
    assert kept == ["step-2", "step-3"]
    assert (tmp_path / "run" / "checkpoints" / "latest").read_text() == "step-3"


def test_resume_never_refuses_to_overwrite_a_run(tiny_model_dir, tmp_path):
    train(
        recipe(
            tiny_model_dir,
            tmp_path / "run",
            "trainer.total_steps=1",
            "trainer.test_freq=0",
            "trainer.save_freq=1",
        )
    )
    with pytest.raises(
        CheckpointError, match=r"already holds checkpoints and trainer\.resume=never"
    ):
        Trainer(recipe(tiny_model_dir, tmp_path / "run", "trainer.resume=never"))


def test_export_merges_lora_into_a_plain_model(tiny_model_dir, tmp_path):
    train(
        recipe(
            tiny_model_dir,
            tmp_path / "run",
            "trainer.total_steps=1",
            "trainer.test_freq=0",
            "trainer.save_freq=1",
            "actor.entropy_coeff=0.1",
        )
    )
    merged = export(str(tmp_path / "run"), tmp_path / "merged", merge_lora=True).folder
    exported = export(str(tmp_path / "run"), tmp_path / "adapter", merge_lora=False)
    adapter = exported.folder
    assert exported.notes == []  # a base the user gave as a folder is named by its absolute path
    assert _adapter_base_name(adapter) == str(tiny_model_dir.resolve())
    from peft import PeftModel

    plain = AutoModelForCausalLM.from_pretrained(merged)
    assert not hasattr(plain, "peft_config")
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with_adapter = PeftModel.from_pretrained(base, adapter)
    ids = torch.tensor([[1, 200, 300, 400]])
    with torch.no_grad():
        assert torch.allclose(plain(ids).logits, with_adapter(ids).logits, atol=1e-4)
    with pytest.raises(ValueError, match="not empty"):
        export(str(tmp_path / "run"), tmp_path / "merged")


def _adapter_base_name(adapter: Path) -> str:
    return json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"]


def test_an_adapter_export_names_the_base_another_machine_has(
    tiny_model_dir, tmp_path, monkeypatch
):
    """Item 10 of issue 28: an adapter exported on a base converted into this machine's cache
    named that cache path, which a cluster's nodes do not have, without a word."""
    train(recipe(tiny_model_dir, tmp_path / "run", "trainer.total_steps=1", "trainer.save_freq=1"))
    monkeypatch.setenv("AGENTTRAIN_CACHE", str(tiny_model_dir.parent))  # the base is "cached"
    local = export(str(tmp_path / "run"), tmp_path / "local")
    assert "converted copy" in local.notes[0] and "--base-model" in local.notes[0]
    shared = export(str(tmp_path / "run"), tmp_path / "shared", base_model="org/base-model")
    assert shared.notes == []
    assert _adapter_base_name(shared.folder) == "org/base-model"
    with pytest.raises(ValueError, match="--base-model names the base of an adapter"):
        export(str(tmp_path / "run"), tmp_path / "merged", merge_lora=True, base_model="x")


def test_the_max_turn_curriculum_follows_its_schedule():
    schedule = [TurnsStage(until_step=2, max_turns=5), TurnsStage(until_step=4, max_turns=10)]
    assert [max_turns_at(s, schedule, 20) for s in (1, 2, 3, 4, 5, 99)] == [5, 5, 10, 10, 10, 10]
    assert max_turns_at(3, [], 20) == 20


def test_task_sampling_covers_every_task_each_epoch(tiny_model_dir, tmp_path):
    config = recipe(tiny_model_dir, tmp_path / "run", "env.split=val", "data.batch_tasks=10")
    trainer = Trainer(config)
    first_epoch = [trainer.task_at(slot) for slot in range(100)]
    assert sorted(first_epoch) == list(range(1000, 1100))
    second_epoch = [trainer.task_at(slot) for slot in range(100, 200)]
    assert second_epoch != first_epoch  # a new shuffle for epoch 2
    assert [(s.index, s.task) for s in trainer.take_tasks(10)] == [
        (s, first_epoch[s]) for s in range(10)
    ]
    assert trainer.take_tasks(3)[0].task == first_epoch[10]  # the stream goes on
    assert Trainer(config).task_at(31) == first_epoch[31]  # a pure function of seed and slot


def test_a_step_whose_prompts_fill_the_context_says_so_instead_of_crashing(
    tiny_model_dir, tmp_path, capsys
):
    """TextCraft's depth-3 prompts are longer than the recipe's 512-token context, so no
    episode gets a model turn: there is nothing to learn from, and the run goes on (it raised
    in backward() before)."""
    [row] = train(deep_textcraft_step(tiny_model_dir, tmp_path / "run"))
    assert row["response_length/clip_ratio"] == 1.0
    assert row["rollout/trained_episodes"] == 16 and "actor/loss" not in row
    assert "the model wrote no token in 16 episodes" in " ".join(capsys.readouterr().out.split())


def test_a_run_reports_its_groups_by_crafting_depth_step_by_step(tiny_model_dir, tmp_path):
    """Where the signal came from, per difficulty class, in the metrics and in report.md."""
    config = deep_textcraft_step(
        tiny_model_dir, tmp_path / "run", "env.task_strata=[depth 1, depth 2]"
    )
    [row] = train(config)
    classes = [f"rollout/stratum/depth_{depth}/" for depth in (1, 2)]
    assert sum(row.get(c + "groups", 0) for c in classes) == row["rollout/played_groups"] == 4
    informative = sum(row.get(c + "informative_groups", 0) for c in classes)
    assert informative == row["rollout/informative_groups"]
    report = (tmp_path / "run" / "report.md").read_text()
    assert "## Steps" in report and "| step |" in report
    assert ": informative / solved / groups |" in report


def test_the_update_runs_without_the_rollouts_key_value_cache(tiny_model_dir, tmp_path):
    """The cache (1.5 GB for SmolLM2 at 32 episodes in bf16) is stale once the weights change:
    it is given back before the update, which needs the memory, and rebuilt by the next
    rollout."""
    trainer = Trainer(recipe(tiny_model_dir, tmp_path / "run", "trainer.test_freq=0"))
    learn, cache_bytes = trainer.update.learn, []

    def spied(*args, **kwargs):
        cache_bytes.append(trainer.policy.decoder.arena.nbytes)
        return learn(*args, **kwargs)

    trainer.update.learn = spied
    trainer.train()
    assert cache_bytes and set(cache_bytes) == {0}  # at every update
    assert trainer.policy.decoder.stats["prefill_tokens"] > 0
