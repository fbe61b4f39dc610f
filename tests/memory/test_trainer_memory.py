"""A GRPO run with the experience pool (configs/textcraft_grpo_memory.yaml, tiny model)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from agenttrain.cli import app
from agenttrain.config import load
from agenttrain.envs import get_spec
from agenttrain.memory.experience import Experience, SplitLeak
from agenttrain.memory.pool import ExperiencePool
from agenttrain.rl.config import TrainConfig
from agenttrain.rl.trainer import Trainer
from agenttrain.rollout.trajectory import read_jsonl, write_jsonl
from agenttrain.run.tracking import read_metrics

RECIPE = Path(__file__).parents[2] / "configs" / "textcraft_grpo_memory.yaml"


def recipe(model_dir, out_dir, *overrides) -> TrainConfig:
    return load(
        TrainConfig,
        RECIPE,
        [
            f"model.path={model_dir}",
            f"run.out_dir={out_dir}",
            "model.lora.enabled=false",
            "data.batch_tasks=2",
            "data.group_size=4",
            "rollout.max_turns=2",
            "rollout.max_new_tokens=12",
            "trainer.total_steps=2",
            "trainer.test_freq=0",
            "trainer.save_freq=1",
            "trainer.loggers=[jsonl]",
            "memory.retrieval=embedding",
            *overrides,
        ],
    )


def test_mixed_run_fills_the_pool_guides_half_of_each_group_and_resumes(tiny_model_dir, tmp_path):
    run = tmp_path / "run"
    Trainer(recipe(tiny_model_dir, run)).train()
    first, second = read_metrics(run / "metrics.jsonl")
    assert first["memory/guided_episodes"] == 0  # the pool starts empty
    assert first["memory/inserted"] > 0 and first["memory/pool_size"] == first["memory/inserted"]
    assert second["memory/guided_episodes"] == 4  # 2 of each group of 4
    assert second["actor/exp_mask_ratio"] > 0
    played = list(read_jsonl(run / "trajectories" / "step-000002.jsonl"))
    for group in {t.group_id for t in played}:
        members = [t for t in played if t.group_id == group]
        assert sum(t.experience is not None for t in members) == 2
    assert all("<experience>" not in m["content"] for t in played for m in t.messages)

    pool_file = run / "memory" / "pool.sqlite"
    pool = ExperiencePool(pool_file)
    size = pool.count()
    assert size == second["memory/pool_size"]
    # An experience written by a step after the last checkpoint (a crash before saving)...
    pool.add([Experience("Task: anything", "from step 3", 0.0, "1", "train", run_step=3)])
    pool.close()
    Trainer(recipe(tiny_model_dir, run, "trainer.total_steps=3"))
    # ... is forgotten on resume, since that step is played again.
    assert ExperiencePool(pool_file).count() == size


def oracle_demos(path: Path, tasks: str = "0-3") -> Path:
    arguments = ["demos", "--env", "textcraft", "--split", "train", "--tasks", tasks]
    result = CliRunner().invoke(app, [*arguments, "--solver", "oracle", "--out", str(path)])
    assert result.exit_code == 0, result.output
    return path


def test_a_pool_seeded_from_demos_guides_the_first_step(tiny_model_dir, tmp_path):
    demos = oracle_demos(tmp_path / "demos.jsonl")
    run = tmp_path / "run"
    overrides = [f"memory.seed_from=[{demos}]", "trainer.total_steps=1"]
    Trainer(recipe(tiny_model_dir, run, *overrides)).train()
    (first,) = read_metrics(run / "metrics.jsonl")
    assert first["memory/guided_episodes"] == 4  # not 0: the pool had the demos' experience
    pool = ExperiencePool(run / "memory" / "pool.sqlite")
    seeded = pool.count() - first["memory/inserted"]
    assert seeded > 0
    goal = next(read_jsonl(demos)).task_info["goal"]
    assert any(goal in item.when_to_use for item in pool.search(f"craft {goal}", 3))


def test_seeding_from_test_split_episodes_is_refused(tiny_model_dir, tmp_path):
    leaked = list(read_jsonl(oracle_demos(tmp_path / "demos.jsonl", "0")))
    leaked[0].task_id = get_spec("textcraft").split("test")[0]
    write_jsonl(tmp_path / "leak.jsonl", leaked)
    run = tmp_path / "run"
    overrides = [f"memory.seed_from=[{tmp_path / 'leak.jsonl'}]", "trainer.total_steps=1"]
    with pytest.raises(SplitLeak, match="not in the environment's training split"):
        Trainer(recipe(tiny_model_dir, run, *overrides)).train()
