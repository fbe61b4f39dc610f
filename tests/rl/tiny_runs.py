"""Small training runs on the tiny model, shared by the trainer tests."""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from agenttrain.config import load
from agenttrain.rl.config import TrainConfig
from agenttrain.rl.demo_loss import DemoLoss
from agenttrain.rl.kl import KLController
from agenttrain.rl.trainer import Trainer
from agenttrain.rl.update import PolicyUpdate
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


def update_gradient(
    tiny_model,
    overrides: list[str],
    episodes: list,
    rewards: list[float],
    *,
    reference: torch.nn.Module | None = None,
    demos: DemoLoss | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The gradient one update on 2 groups of 2 episodes takes, and its metrics.

    The update runs on a copy of the model at learning rate 0, so tests compare gradients of
    two settings on the same weights.
    """
    base = ["model.path=tiny", "data.batch_tasks=2", "data.group_size=2"]
    config = load(TrainConfig, None, [*base, *overrides])
    model = copy.deepcopy(tiny_model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    update = PolicyUpdate(
        config, model, reference, optimizer, KLController(0.0), 0, torch.device("cpu"), None, demos
    )
    metrics = update.learn(episodes, rewards, {}, step=1)
    grads = [p.grad.flatten() for p in model.parameters() if p.grad is not None]
    return (torch.cat(grads) if grads else torch.zeros(1)), metrics
