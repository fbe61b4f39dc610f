"""Every config shipped in configs/ is read and checked, so a recipe that only a GPU machine
runs (configs/textcraft_recipe_gpu.yaml) cannot rot on the CPU-only CI."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

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


def recipe_from(name: str, tmp_path: Path) -> Recipe:
    path = Path(__file__).parents[1] / "configs" / name
    return Recipe(config_io.load(RecipeConfig, path, [f"run.out_dir={tmp_path}"]))


def same_but(ours: BaseModel, measured: BaseModel, *device_settings: str) -> bool:
    """Equal settings apart from those that only size the work for the device."""
    skip = set(device_settings)
    return ours.model_dump(exclude=skip) == measured.model_dump(exclude=skip)


def test_the_gpu_recipe_trains_screens_and_evaluates_on_cuda(tmp_path):
    recipe = recipe_from("textcraft_recipe_gpu.yaml", tmp_path)
    assert recipe.sft_config.model.device == "cuda"
    grpo = config_io.load(TrainConfig, recipe.config.grpo.config, recipe.grpo_overrides)
    assert grpo.model.device == "cuda" and grpo.model.decode == "auto"
    # its evaluations and its screening fill the card's larger decode buckets, not 32 rows
    assert recipe.eval_config(["m"]).rollout.max_in_flight == 128
    screening = recipe.training_play("m", "train", [0], 4, 0.6, grpo.rollout)
    assert screening.device == "cuda" and screening.rollout.max_in_flight == 128


def test_the_gpu_recipe_runs_more_of_the_todo_recipes_steps(tmp_path):
    """The GPU recipe is the best CPU-measured arm (configs/textcraft_recipe_todo.yaml,
    +15.0 pooled, docs/results.md, #26) with more steps: same demonstrations, SFT, screening,
    and the same GRPO step. A drift would make its table a new, unmeasured arm."""
    gpu = recipe_from("textcraft_recipe_gpu.yaml", tmp_path / "gpu")
    cpu = recipe_from("textcraft_recipe_todo.yaml", tmp_path / "cpu")
    assert gpu.config.demos == cpu.config.demos and gpu.config.screen == cpu.config.screen
    assert same_but(gpu.sft_config.data, cpu.sft_config.data, "train")  # each its own folder
    assert same_but(gpu.sft_config.optim, cpu.sft_config.optim, "micro_batch_tokens")
    assert same_but(gpu.sft_config.model, cpu.sft_config.model, "device")
    screened = tmp_path / "screen.jsonl"
    ours, measured = gpu.grpo_stage_config("m", screened), cpu.grpo_stage_config("m", screened)
    for part in ("env", "rollout", "sampling", "data", "algorithm", "reward"):
        assert getattr(ours, part) == getattr(measured, part), part
    assert same_but(ours.actor, measured.actor, "micro_batch_tokens", "packing", "demo_loss")
    # the demonstration loss reads each recipe's own demos.jsonl
    assert same_but(ours.actor.demo_loss, measured.actor.demo_loss, "data")
    assert same_but(ours.model, measured.model, "device")
    assert (ours.trainer.total_steps, measured.trainer.total_steps) == (24, 10)
    evaluation, cpu_evaluation = gpu.eval_config(["m"]), cpu.eval_config(["m"])
    assert evaluation.rollout == cpu_evaluation.rollout.model_copy(update={"max_in_flight": 128})
    assert (evaluation.n, evaluation.tasks, evaluation.temperature) == (
        cpu_evaluation.n,
        cpu_evaluation.tasks,
        cpu_evaluation.temperature,
    )


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


def test_make_demos_recipe_is_the_plain_one_with_the_measured_differences(tmp_path):
    """configs/textcraft_recipe.yaml (`make demo`) is the arm measured from the plain recipe
    (docs/results.md, #26): quoting recovery demonstrations, 10 depth-1 steps, the KL guard.
    Anything else drifting would make its figures belong to an unmeasured arm."""
    makefile = (Path(__file__).parents[1] / "Makefile").read_text()
    assert "agenttrain recipe configs/textcraft_recipe.yaml\n" in makefile  # what it measures
    ours = recipe_from("textcraft_recipe.yaml", tmp_path / "recovery")
    demo = recipe_from("textcraft_recipe_plain.yaml", tmp_path / "demo")
    differences = {"recovery": 0.5, "recovery_from": "both", "quote_recipes": True}
    assert ours.config.demos == demo.config.demos.model_copy(update=differences)
    assert same_but(ours.sft_config, demo.sft_config, "run", "data")
    assert same_but(ours.sft_config.data, demo.sft_config.data, "train")
    mine, theirs = ours.grpo_stage_config("m", None), demo.grpo_stage_config("m", None)
    for part in ("env", "rollout", "sampling", "data", "reward", "actor", "model"):
        assert getattr(mine, part) == getattr(theirs, part), part
    assert (mine.trainer.total_steps, theirs.trainer.total_steps) == (10, 6)
    assert (mine.algorithm.kl.coef, theirs.algorithm.kl.coef) == (0.1, 0.001)
    assert same_but(mine.algorithm.kl, theirs.algorithm.kl, "coef")
    assert same_but(mine.algorithm, theirs.algorithm, "kl")
    evaluation = ours.eval_config(["m"])
    assert evaluation == demo.eval_config(["m"]).model_copy(update={"out": evaluation.out})


def test_the_todo_recipe_is_the_anchored_one_with_todo_demonstrations(tmp_path):
    """The to-do arm was measured as the anchored recipe's SFT and GRPO stages on to-do
    demonstrations that recover from a refused craft (docs/results.md, #26): only the demos
    stage, the demonstrations the SFT and the demonstration loss read, and the screening
    before GRPO may differ."""
    todo = recipe_from("textcraft_recipe_todo.yaml", tmp_path / "todo")
    anchored = recipe_from("textcraft_recipe_anchored.yaml", tmp_path / "anchored")
    assert todo.config.demos.todo and not anchored.config.demos.todo
    assert todo.config.demos.recovery == 0.5 and todo.config.demos.recovery_from == "craft"
    assert not todo.config.demos.quote_recipes
    # screening measured as separate commands: 4 samples of every depth-1/2 goal at GRPO's
    # temperature, turn limit and reply length, then only the goals both solved and failed
    screen = todo.config.screen
    assert screen.enabled and screen.n == 4 and screen.keep == "mixed"
    assert (screen.temperature, screen.max_turns, screen.max_new_tokens) == (None, None, None)
    screened = todo.grpo_stage_config("m", tmp_path / "s.jsonl").data
    assert screened.task_sampling == "frontier" and screened.frontier.keep == "mixed"
    assert len(todo.screen_tasks()) == 310
    assert same_but(todo.sft_config.data, anchored.sft_config.data, "train")
    assert same_but(todo.sft_config, anchored.sft_config, "data", "run")
    ours, theirs = todo.grpo_stage_config("m", None), anchored.grpo_stage_config("m", None)
    assert same_but(ours, theirs, "actor", "run")
    assert same_but(ours.actor, theirs.actor, "demo_loss")
    assert same_but(ours.actor.demo_loss, theirs.actor.demo_loss, "data")
    assert todo.eval_config(["m"]).model_dump(exclude={"out"}) == anchored.eval_config(
        ["m"]
    ).model_dump(exclude={"out"})
