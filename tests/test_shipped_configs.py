"""Every config shipped in configs/ is read and checked, so a recipe that only a GPU machine
runs (configs/textcraft_recipe_gpu.yaml) cannot rot on the CPU-only CI."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agenttrain import config as config_io
from agenttrain.recipe import Recipe, RecipeConfig
from agenttrain.rl.config import TrainConfig
from agenttrain.sft.config import SFTConfig

CONFIGS = sorted((Path(__file__).parents[1] / "configs").glob("*.yaml"))


def kind(path: Path) -> type:
    keys = set(yaml.safe_load(path.read_text()))
    if {"demos", "sft", "grpo"} <= keys:
        return RecipeConfig
    if "optim" in keys:
        return SFTConfig
    return TrainConfig


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_a_shipped_config_is_valid(path, tmp_path):
    model = kind(path)
    config = config_io.load(model, path, [f"run.out_dir={tmp_path}"])
    if model is RecipeConfig:
        Recipe(config)  # reads and checks both stage configs with the recipe's overrides


def test_the_gpu_recipe_trains_and_evaluates_on_cuda(tmp_path):
    path = Path(__file__).parents[1] / "configs" / "textcraft_recipe_gpu.yaml"
    recipe = Recipe(config_io.load(RecipeConfig, path, [f"run.out_dir={tmp_path}"]))
    assert recipe.sft_config.model.device == "cuda"
    grpo = config_io.load(TrainConfig, recipe.config.grpo.config, recipe.grpo_overrides)
    assert grpo.model.device == "cuda" and grpo.model.decode == "auto"
    # its evaluations fill the card's larger decode buckets, not the CPU's 32 rows
    assert recipe.eval_config(["m"]).rollout.max_in_flight == 128


def test_the_gpu_recipe_carries_the_best_cpu_measured_levers(tmp_path):
    """Recovery demonstrations (crafts and gets) that quote their recipes, all of them, then
    GRPO on depth-1 and depth-2 goals: +10.0 points over its SFT (docs/results.md, #26)."""
    path = Path(__file__).parents[1] / "configs" / "textcraft_recipe_gpu.yaml"
    recipe = Recipe(config_io.load(RecipeConfig, path, [f"run.out_dir={tmp_path}"]))
    demos = recipe.config.demos
    assert demos.recovery == 0.5 and demos.recovery_from == "both" and demos.quote_recipes
    assert recipe.sft_config.data.limit is None
    grpo = config_io.load(TrainConfig, recipe.config.grpo.config, recipe.grpo_overrides)
    assert grpo.env.task_strata == ["depth 1", "depth 2"] and grpo.sampling.temperature == 0.8
