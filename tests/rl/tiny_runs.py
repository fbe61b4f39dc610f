"""Small training runs on the tiny model, shared by the trainer tests."""

from __future__ import annotations

from pathlib import Path

from agenttrain.config import load
from agenttrain.rl.config import TrainConfig
from agenttrain.rl.trainer import Trainer
from agenttrain.run.tracking import read_metrics

RECIPE = Path(__file__).parents[2] / "configs" / "largest_grpo.yaml"


def recipe(model_dir, out_dir, *overrides) -> TrainConfig:
    """Largest Number, 4 tasks × 4 episodes, 2 steps with validation, jsonl metrics only."""
    return load(
        TrainConfig,
        RECIPE,
        [
            f"model.path={model_dir}",
            f"run.out_dir={out_dir}",
            "data.batch_tasks=4",
            "data.group_size=4",
            "trainer.total_steps=2",
            "trainer.test_freq=2",
            "trainer.val_tasks=8",
            "trainer.save_freq=2",
            "trainer.loggers=[jsonl]",
            *overrides,
        ],
    )


def deep_textcraft_step(model_dir, out_dir, *overrides) -> TrainConfig:
    """The recipe on TextCraft's depth-3 goals in the ReAct format, one step, no validation."""
    return recipe(
        model_dir,
        out_dir,
        "env.name=textcraft",
        "env.task_strata=[depth 3]",
        "rollout.action_format=react",
        "trainer.total_steps=1",
        "trainer.test_freq=0",
        *overrides,
    )


def train(config: TrainConfig) -> list[dict]:
    """Run to the end; the metrics rows."""
    Trainer(config).train()
    return read_metrics(config.run.out_dir / "metrics.jsonl")
