"""Operating a run: launch it with its servers, look at or stop a launch, check beforehand."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.table import Table

from agenttrain.cli.options import ServerOption
from agenttrain.cli.output import console, refusal

if TYPE_CHECKING:
    from agenttrain.doctor import Check


def launch(
    config: Annotated[
        Path | None, typer.Argument(help="Training YAML; its launch: section says what to start.")
    ] = None,
    overrides: Annotated[
        list[str] | None,
        typer.Argument(help="Dotted overrides, passed on to the training as well."),
    ] = None,
    status: Annotated[
        Path | None,
        typer.Option("--status", help="Show the processes of the launch of this run folder."),
    ] = None,
    stop: Annotated[
        Path | None,
        typer.Option("--stop", help="Stop the launch of this run folder (its processes only)."),
    ] = None,
) -> None:
    """Start the environment servers (and memory service) a config names, check they answer,
    train, and stop everything started when the training ends, fails or is interrupted.

    Example: agenttrain launch configs/textcraft_grpo.yaml 'launch.servers={textcraft: {count: 2}}'
    """
    from agenttrain.config import ConfigError
    from agenttrain.envs.registry import UnknownEnvironment
    from agenttrain.launcher.services import LaunchError
    from agenttrain.launcher.state import stop_launch
    from agenttrain.launcher.supervisor import Launcher, LaunchFailed

    if (config is not None) + (status is not None) + (stop is not None) != 1:
        raise refusal("give a CONFIG to launch, or one of --status RUN / --stop RUN")
    try:
        if status is not None:
            _print_launch_status(status)
            return
        if stop is not None:
            stopped = stop_launch(stop)
            console.print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")
            return
        assert config is not None
        launcher = Launcher(
            config, overrides or [], lambda text: console.print(text, markup=False, highlight=False)
        )
        code = launcher.run()
    except (ConfigError, LaunchError, UnknownEnvironment, FileNotFoundError) as problem:
        raise refusal(problem) from None
    except LaunchFailed as failure:
        from rich.markup import escape

        console.print(f"[red]error:[/] {escape(str(failure))}", highlight=False, soft_wrap=True)
        raise typer.Exit(failure.exit_code) from None
    if code:
        raise typer.Exit(code)


def _print_launch_status(run: Path) -> None:
    """The processes of a run folder's launch, and where their logs are."""
    from agenttrain.launcher.state import read_state, status_rows

    table = Table("process", "pid", "alive", "url", "answers", "restarts", box=box.SIMPLE)
    for row in status_rows(read_state(run)):
        table.add_row(*row)
    console.print(table)
    console.print(f"logs: {run / 'launch' / 'logs'}", highlight=False, soft_wrap=True)


def doctor(
    config: Annotated[
        Path | None, typer.Argument(help="Training YAML to check (default: the built-in one).")
    ] = None,
    overrides: Annotated[
        list[str] | None, typer.Argument(help="Dotted overrides, as for `agenttrain train`.")
    ] = None,
    server: ServerOption = None,
    env: Annotated[
        str | None,
        typer.Option(help="Environment the --server URLs serve (default: the config's only one)."),
    ] = None,
    verl: Annotated[
        bool,
        typer.Option(
            "--verl", help="Also check verl, Ray, vLLM and the open-file limit Ray needs."
        ),
    ] = False,
) -> None:
    """Check what a training run needs before it starts: servers (reachable, the right
    environment, the run's tasks), Java for SciWorld, the model, extras, disk and memory.

    Exit status: 0 every check passed (warnings allowed), 1 a check failed, 2 bad config.

    Example: agenttrain doctor configs/textcraft_grpo.yaml --server http://127.0.0.1:36001
    """
    from agenttrain.config import ConfigError, load
    from agenttrain.doctor import diagnose, with_servers
    from agenttrain.rl.config import TrainConfig

    if config is not None and "=" in str(config) and not config.exists():
        overrides, config = [str(config), *(overrides or [])], None  # overrides, no config
    extra = [f"env.name={env}"] if env and config is None else []
    try:
        settings = load(TrainConfig, config, [*(overrides or []), *extra])
        if server:
            settings = with_servers(settings, server, env)
    except (ConfigError, ValueError) as problem:
        raise refusal(problem) from None
    checks = diagnose(settings, verl=verl)
    console.print(_checks_table(checks))
    failures = sum(check.status == "fail" for check in checks)
    if failures:
        console.print(f"[red]{failures} of {len(checks)} checks failed[/]")
        raise typer.Exit(1)
    console.print(f"[green]all {len(checks)} checks passed[/]")


def _checks_table(checks: list[Check]) -> Table:
    """One row a check: what, its status in colour, what was found, how to fix it."""
    from rich.markup import escape

    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("check", overflow="fold")
    table.add_column("status", no_wrap=True)
    table.add_column("found", overflow="fold")
    table.add_column("how to fix", overflow="fold")
    styles = {"ok": "[green]ok[/]", "warn": "[yellow]warn[/]", "fail": "[red]FAIL[/]"}
    for check in checks:
        cells = (escape(check.name), escape(check.detail), escape(check.fix))
        table.add_row(cells[0], styles[check.status], *cells[1:])
    return table
