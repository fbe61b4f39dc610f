"""Training runs: GRPO, SFT, the whole recipe, and exporting what they trained."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from agenttrain.cli.options import AllowConfigChangeOption, GrpoRecipeArgument
from agenttrain.cli.output import console, failure


def train(
    config: GrpoRecipeArgument,
    overrides: Annotated[
        list[str] | None,
        typer.Argument(
            help="Dotted overrides, e.g. algorithm.kl.coef=0.01 trainer.total_steps=50."
        ),
    ] = None,
    allow_config_change: AllowConfigChangeOption = False,
) -> None:
    """Train with GRPO (or RLOO, REINFORCE++): rollouts, updates, checkpoints, validation, report.

    Example: agenttrain train configs/textcraft_grpo.yaml trainer.total_steps=50
    """
    from agenttrain.rl.config import TrainConfig
    from agenttrain.rl.trainer import Trainer

    _run_trainer(
        lambda: Trainer(
            _load_run_config(TrainConfig, config, overrides), console, allow_config_change
        )
    )


def _load_run_config(model: type, path: Path, overrides: list[str] | None) -> Any:
    """The run's config; a copied run folder's config.yaml that still names the original
    folder is refused (see `check_config_location`)."""
    from agenttrain.config import load
    from agenttrain.run.history import check_config_location

    overrides = overrides or []
    config = load(model, path, overrides)
    given = any(item.split("=", 1)[0].strip() == "run.out_dir" for item in overrides)
    check_config_location(Path(path), Path(config.run.out_dir), given)
    return config


def set_up_errors() -> tuple[type[Exception], ...]:
    """What a training command reports in one line (exit 2) instead of a traceback."""
    from agenttrain.config import ConfigError
    from agenttrain.envs import EnvError, NotInProcess
    from agenttrain.envs.registry import DuplicateEnvironment, EnvKwargsError
    from agenttrain.envs.source import EnvSourceError
    from agenttrain.memory.service import MemoryServiceError
    from agenttrain.policy.base import PolicyError
    from agenttrain.rl.rewards import RewardFunctionError
    from agenttrain.run.checkpoint import CheckpointError
    from agenttrain.run.lock import RunFolderBusy
    from agenttrain.run.tracking import TrackerError
    from agenttrain.sft.data import DataError
    from agenttrain.sft.guard import HeldOutLeak

    return (
        ConfigError,
        CheckpointError,
        RunFolderBusy,
        DataError,
        HeldOutLeak,
        RewardFunctionError,
        TrackerError,
        PolicyError,
        EnvError,
        EnvSourceError,
        EnvKwargsError,
        DuplicateEnvironment,
        NotInProcess,
        MemoryServiceError,
        KeyError,
    )


def _run_trainer(build: Callable[[], Any]) -> None:
    """Build a trainer (config and set-up errors exit 2), train; exit 3 when the run failed
    (e.g. too many environment errors), 130 when stopped by Ctrl-C, 143 by SIGTERM (after
    saving a checkpoint)."""
    from agenttrain.run.runtime import RunFailed

    try:
        trainer = build()
    except set_up_errors() as problem:
        raise failure(problem) from None
    from agenttrain.run.checkpoint import CheckpointError
    from agenttrain.run.lock import RunFolderBusy

    try:
        trainer.train()
    except RunFailed as failed:
        raise failure(failed, failed.exit_code, highlight=False) from None
    except RunFolderBusy as busy:
        raise failure(busy, highlight=False) from None
    except CheckpointError as failed:  # e.g. a full disk while saving
        raise failure(failed, 1, highlight=False) from None
    if trainer.stop_requested:
        raise typer.Exit(trainer.stop.exit_code)


def sft(
    config: Annotated[Path, typer.Argument(help="YAML recipe, e.g. configs/textcraft_sft.yaml.")],
    overrides: Annotated[
        list[str] | None,
        # Rich markup would read [...] as a style tag and drop it: \\[ shows a bracket.
        typer.Argument(help="Dotted overrides, e.g. optim.lr=1e-4 'data.train=\\[demos.jsonl]'."),
    ] = None,
    allow_config_change: AllowConfigChangeOption = False,
) -> None:
    """Supervised fine-tuning on multi-turn episodes (loss on the agent's turns only).

    Reads agenttrain trajectories (from `demos` or `eval`), AgentGym AgentTraj or chat JSONL;
    writes checkpoints that `agenttrain train model.path=...` continues from.

    Example: agenttrain sft configs/textcraft_sft.yaml 'data.train=\\[runs/demos/textcraft.jsonl]'
    """
    from agenttrain.sft.config import SFTConfig
    from agenttrain.sft.trainer import SFTTrainer

    _run_trainer(
        lambda: SFTTrainer(
            _load_run_config(SFTConfig, config, overrides), console, allow_config_change
        )
    )


def recipe(
    config: Annotated[
        Path, typer.Argument(help="YAML recipe, e.g. configs/textcraft_recipe.yaml.")
    ] = Path("configs/textcraft_recipe.yaml"),
    overrides: Annotated[
        list[str] | None,
        typer.Argument(
            help="Dotted overrides, e.g. eval.n=2 'grpo.overrides=\\[trainer.total_steps=4]'."
        ),
    ] = None,
) -> None:
    """Demonstrations -> SFT -> GRPO -> eval of base, SFT and SFT+GRPO on the same tasks.

    Finished stages are reused, so running the same command again continues a stopped recipe;
    a larger GRPO trainer.total_steps continues the finished GRPO stage.
    rft.enabled=true adds the RFT baseline (SFT continued on the SFT model's own successes).

    Example: agenttrain recipe configs/textcraft_recipe.yaml
    """
    from agenttrain.eval.runner import EvalStopped
    from agenttrain.recipe import Recipe, load_recipe
    from agenttrain.run.runtime import RunFailed

    try:
        plan = Recipe(load_recipe(config, overrides or []), console)
        report = plan.run()
    except (*set_up_errors(), ValueError) as problem:
        raise failure(problem) from None
    except RunFailed as failed:
        raise failure(failed, failed.exit_code, highlight=False) from None
    except EvalStopped as stopped:  # in an evaluation or the screening: what finished is kept
        console.print(f"[yellow]{stopped}[/]", highlight=False)
        raise typer.Exit(stopped.exit_code) from None
    except KeyboardInterrupt:
        console.print("[yellow]stopped; run the same command again to continue[/]")
        raise typer.Exit(130) from None
    console.print(f"[bold]Report:[/] {report}")


def export(
    source: Annotated[str, typer.Argument(help="A run folder, checkpoint folder or model spec.")],
    out: Annotated[Path, typer.Option(help="Folder to write (must be new or empty).")],
    merge_lora: Annotated[
        bool, typer.Option("--merge-lora", help="Merge a LoRA adapter into its base.")
    ] = False,
    base_model: Annotated[
        str | None,
        typer.Option(
            help="What an adapter export names as its base: a Hub id or a path the machine that "
            "loads it has (default: the base's absolute path here)."
        ),
    ] = None,
) -> None:
    """Write a standalone Hugging Face model folder from a run or checkpoint.

    Example: agenttrain export runs/textcraft-grpo --out models/textcraft --merge-lora
    """
    from agenttrain.policy.base import PolicyError
    from agenttrain.rl.export import export as export_model

    try:
        exported = export_model(source, out, merge_lora, base_model)
    except (PolicyError, ValueError) as problem:
        raise failure(problem) from None
    console.print(f"Exported {source} to {exported.folder} ({exported.kind})")
    for note in exported.notes:
        console.print(f"[yellow]note:[/] {note}")
