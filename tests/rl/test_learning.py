"""GRPO measurably improves the real embedded model on a task it sometimes solves at first.

SmolLM2-135M answers "which number is the largest" correctly about 20% of the time when
sampling (about 38% greedily). A few GRPO steps with LoRA must raise greedy success on the
same held-out tasks by a clear margin; if the trainer's gradient, masks or advantages were
wrong, they would not.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agenttrain.config import load
from agenttrain.rl.config import TrainConfig
from agenttrain.rl.trainer import Trainer
from agenttrain.run.tracking import read_metrics

pytestmark = pytest.mark.slow  # trains the real model for minutes

RECIPE = Path(__file__).parents[2] / "configs" / "largest_grpo.yaml"


def test_a_few_grpo_steps_raise_held_out_success(smollm2_dir, tmp_path):
    config = load(
        TrainConfig,
        RECIPE,
        [
            f"run.out_dir={tmp_path / 'run'}",
            # 10 steps: after 5 the gain depends on the sampling seeds (one seed: +0.28,
            # another: +0.03); after 10 both are well past it. 4 tasks x 8 a step (the
            # recipe's 8 x 8 halved, to keep the suite in its time budget), measured
            # 2026-11-25: seed 0 0.375 -> 0.734, seed 1 0.375 -> 0.750, in 6 min (8 x 8:
            # 0.375 -> 0.812 in 11 min)
            "data.batch_tasks=4",
            "trainer.total_steps=10",
            "trainer.test_freq=10",
            "trainer.save_freq=10",
            "trainer.val_tasks=64",
            "trainer.loggers=[jsonl]",
        ],
    )
    Trainer(config).train()
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    before, after = rows[0]["val/success_rate"], rows[-1]["val/success_rate"]
    assert after >= before + 0.15, (before, after)
    assert rows[-1]["critic/score/mean"] > rows[1]["critic/score/mean"]
