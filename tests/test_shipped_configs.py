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


MEASURED_ARMS = {
    # recipe: (demos settings, GRPO overrides beyond the quoting arm's, eval reply length)
    "textcraft_recipe_quoted.yaml": ((0.5, "both", True, False), [], 96),
    "textcraft_recipe_screened.yaml": (
        (0.5, "both", True, True),
        ["rollout.max_new_tokens=160", "data.task_sampling=frontier", "trainer.total_steps=8"],
        160,
    ),
}


@pytest.mark.parametrize("name", sorted(MEASURED_ARMS))
def test_the_cpu_recipes_run_the_measured_arms(name, tmp_path):
    """The quoted and screened recipes resolve to the settings of the arms measured with
    separate commands (docs/results.md, #26): a drift here would make their tables new arms."""
    root = Path(__file__).parents[1]
    recipe = Recipe(
        config_io.load(RecipeConfig, root / "configs" / name, [f"run.out_dir={tmp_path}"])
    )
    demos_settings, extra, reply_tokens = MEASURED_ARMS[name]
    demos = recipe.config.demos
    assert (
        demos.recovery,
        demos.recovery_from,
        demos.quote_recipes,
        demos.quote_ingredients,
    ) == demos_settings
    measured_sft = config_io.load(
        SFTConfig,
        root / "configs" / "textcraft_sft.yaml",
        ["eval.after_training=false", "data.limit=null"],
    )
    assert recipe.sft_config.optim == measured_sft.optim
    assert recipe.sft_config.data.limit is None and recipe.sft_config.model == measured_sft.model
    arm = [
        "trainer.total_steps=4",
        "trainer.save_freq=1",
        "trainer.test_freq=0",
        "data.batch_tasks=4",
        "data.group_size=8",
        "algorithm.filter_groups.enabled=true",
        "algorithm.filter_groups.max_num_gen_batches=2",
        "sampling.temperature=0.8",
        "reward.format_penalty=0.5",
        "env.task_strata=[depth 1, depth 2]",
        *extra,
    ]
    screened = None
    if recipe.config.screen.enabled:
        # the measured screening: training tasks 0-309 (depth 1 and 2) once, as GRPO samples
        assert recipe.screen_tasks() == list(range(310)) and recipe.config.screen.n == 1
        screened = tmp_path / "screen.jsonl"
        arm.append(f"data.frontier.seed_from=[{screened}]")
    measured = config_io.load(TrainConfig, root / "configs" / "textcraft_grpo.yaml", arm)
    ours = recipe.grpo_stage_config("m", screened)
    for part in ("env", "rollout", "sampling", "data", "algorithm", "reward", "trainer", "actor"):
        assert getattr(ours, part) == getattr(measured, part), part
    evaluation = recipe.eval_config(["m"])
    assert (evaluation.n, evaluation.temperature, evaluation.rollout.max_turns) == (4, 0.6, 10)
    assert evaluation.rollout.max_new_tokens == reply_tokens
    assert evaluation.tasks == list(range(100))
