"""`agenttrain verl`: a recipe as verl overrides, and its launch on verl + Ray
(agenttrain.integrations.verl)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from agenttrain.cli.options import GrpoRecipeArgument
from agenttrain.cli.output import console, refusal

app = typer.Typer(
    help="Train a recipe on verl + Ray (the agenttrain[verl] extra): overrides and launch.",
    no_args_is_help=True,
)

OverridesArgument = Annotated[
    list[str] | None,
    typer.Argument(help="Dotted overrides of the recipe, e.g. data.group_size=8."),
]
VerlOverrideOption = Annotated[
    list[str] | None,
    typer.Option(
        "--verl",
        help="An extra verl override applied after ours (repeat), e.g. "
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.6.",
    ),
]
DataDirOption = Annotated[
    Path | None,
    typer.Option(help="Folder of the parquet and agent-loop YAML. Default: <run.out_dir>/verl."),
]
GpusOption = Annotated[int, typer.Option("--gpus", min=1, help="GPUs per node.")]
NodesOption = Annotated[int, typer.Option("--nodes", min=1, help="Nodes of the Ray cluster.")]
PromptLengthOption = Annotated[
    int | None,
    typer.Option(
        min=1,
        help="verl's prompt budget (instructions + first observation); the rest of "
        "rollout.max_context is the response budget. Default: min(1024, max_context/2).",
    ),
]


def _verl_plan(
    config: Path,
    overrides: list[str] | None,
    data_dir: Path | None,
    gpus: int,
    nodes: int,
    prompt_length: int | None,
    extra: list[str] | None,
) -> Any:
    """The verl plan of a recipe; a bad config or an unmappable value exits 2."""
    from agenttrain.cli.run import set_up_errors
    from agenttrain.config import load
    from agenttrain.integrations.verl.launch import plan_run
    from agenttrain.rl.config import TrainConfig

    try:
        return plan_run(
            load(TrainConfig, config, overrides or []),
            data_dir=data_dir,
            n_gpus_per_node=gpus,
            nnodes=nodes,
            prompt_length=prompt_length,
            extra=extra or [],
        )
    except (*set_up_errors(), ValueError) as problem:
        raise refusal(problem) from None


def _write_verl_files(plan: Any, *, data: bool, only_missing: bool) -> None:
    """Write the agent loop's YAML, and with `data` the parquet of the plan's splits."""
    from agenttrain.integrations.verl.data import DataExportError
    from agenttrain.integrations.verl.launch import write_data, write_loop_config

    console.print(f"agent loop settings -> {write_loop_config(plan)}", markup=False, soft_wrap=True)
    if not data:
        return
    try:
        written = write_data(plan, only_missing=only_missing)
    except (DataExportError, KeyError, ValueError) as problem:
        raise refusal(problem) from None
    for item in written:
        console.print(
            f"{item.split} split: {item.rows} tasks -> {item.path}", markup=False, soft_wrap=True
        )


@app.command("config")
def verl_config(
    config: GrpoRecipeArgument,
    overrides: OverridesArgument = None,
    data_dir: DataDirOption = None,
    gpus: GpusOption = 1,
    nodes: NodesOption = 1,
    prompt_length: PromptLengthOption = None,
    write_data: Annotated[
        bool, typer.Option(help="Also write the train and validation parquet.")
    ] = False,
    verl: VerlOverrideOption = None,
) -> None:
    """Print the verl overrides that reproduce a recipe, and the keys verl cannot follow.

    Writes the agent loop's YAML (and the data with --write-data) into --data-dir.

    Example: agenttrain verl config configs/textcraft_grpo.yaml --gpus 8 --write-data
    """
    import shlex

    plan = _verl_plan(config, overrides, data_dir, gpus, nodes, prompt_length, verl)
    for arg in plan.args():
        typer.echo(shlex.quote(arg))
    table = Table(title="agenttrain keys verl cannot follow")
    table.add_column("key", no_wrap=True)
    table.add_column("value", max_width=16)
    table.add_column("effect", no_wrap=True)
    table.add_column("why")
    for item in plan.overrides.unsupported:
        effect = "[yellow]differs[/]" if item.matters else "none"
        table.add_row(item.key, repr(item.value), effect, item.reason)
    console.print(table)
    for note in plan.overrides.notes:
        console.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
    _write_verl_files(plan, data=write_data, only_missing=False)


@app.command("train")
def verl_train(
    config: GrpoRecipeArgument,
    overrides: OverridesArgument = None,
    data_dir: DataDirOption = None,
    gpus: GpusOption = 1,
    nodes: NodesOption = 1,
    prompt_length: PromptLengthOption = None,
    ray_address: Annotated[
        str | None, typer.Option(help="Ray cluster to join (RAY_ADDRESS); default: a local one.")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option(help="Print the command, write and run nothing.")
    ] = False,
    verl: VerlOverrideOption = None,
) -> None:
    """Run a recipe with verl's trainer (python -m verl.trainer.main_ppo) on a GPU cluster.

    Writes the agent loop's YAML and any missing parquet into --data-dir first.

    Example: agenttrain verl train configs/textcraft_grpo.yaml --gpus 8 --ray-address auto
    """
    import shlex

    from agenttrain.integrations.verl import VerlMissing, require_verl
    from agenttrain.integrations.verl.launch import run_main_ppo

    try:
        require_verl("agenttrain verl train")
    except VerlMissing as missing:
        raise refusal(missing) from None
    plan = _verl_plan(config, overrides, data_dir, gpus, nodes, prompt_length, verl)
    prefix = f"RAY_ADDRESS={shlex.quote(ray_address)} " if ray_address else ""
    typer.echo(prefix + shlex.join(plan.command()))
    if dry_run:
        return
    _write_verl_files(plan, data=True, only_missing=True)
    raise typer.Exit(run_main_ppo(plan, ray_address))
