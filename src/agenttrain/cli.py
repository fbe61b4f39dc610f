"""The `agenttrain` command. Each command is a thin wrapper over a module function."""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from agenttrain import __version__

app = typer.Typer(
    help="Train LLM agents with online RL in AgentGym-style text environments.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_show_locals=False,
)
console = Console()

ServerOption = Annotated[
    list[str] | None,
    typer.Option(
        "--server",
        help="URL of an AgentGym-compatible server (repeat for several); default: in-process.",
    ),
]
TokenOption = Annotated[
    str | None,
    typer.Option(envvar="AGENTTRAIN_SERVER_TOKEN", help="Bearer token of the server(s)."),
]


def _version(value: bool) -> None:
    if value:
        console.print(f"agenttrain {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    """agenttrain: environments, rollouts, GRPO training and evaluation for LLM agents."""


@app.command()
def envs() -> None:
    """List the environments, whether they run here, and their task splits.

    Example: agenttrain envs
    """
    from agenttrain.envs import registrations

    table = Table(title="agenttrain environments")
    for column in ("name", "runs here", "tasks", "splits", "max turns", "AgentGym wire"):
        table.add_column(column)
    notes = []
    for entry in registrations():
        spec = entry.spec
        splits = " · ".join(f"{name} {len(ids)}" for name, ids in spec.splits().items())
        if entry.in_process:
            runs = "[green]in-process[/]"
        else:
            runs = "[yellow]AgentGym server[/]"
            notes.append(f"[bold]{spec.name}[/]: {spec.requirements}")
        proto = spec.protocol
        table.add_row(
            spec.name,
            runs,
            str(spec.num_tasks or "-"),
            splits or "-",
            str(spec.default_max_turns),
            f"{proto.id_field} / {proto.task_field}",
        )
    console.print(table)
    for note in notes:
        console.print(note)


@app.command()
def serve(
    env: Annotated[str, typer.Argument(help="Environment to serve, e.g. textcraft.")],
    host: Annotated[str, typer.Option(help="Interface to bind; 0.0.0.0 exposes it.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port; 0 picks a free one.")] = 36001,
    max_sessions: Annotated[int, typer.Option(min=1, help="Live sessions allowed at once.")] = 1024,
    session_ttl: Annotated[
        float, typer.Option(min=1, help="Close sessions idle for this many seconds.")
    ] = 1800.0,
    token: TokenOption = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "warning",
    access_log: Annotated[bool, typer.Option(help="Log every request.")] = False,
) -> None:
    """Serve an environment over AgentGym's HTTP protocol (unmodified AgentGym clients work).

    Example: agenttrain serve textcraft --host 127.0.0.1 --port 36001
    """
    from agenttrain.serving.runner import PortInUse
    from agenttrain.serving.runner import serve as run_server

    logging.basicConfig(level=log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    try:
        run_server(
            env,
            host=host,
            port=port,
            max_sessions=max_sessions,
            session_ttl_s=session_ttl,
            token=token,
            log_level=log_level,
            access_log=access_log,
        )
    except (PortInUse, ValueError, KeyError) as problem:
        console.print(f"[red]error:[/] {problem}")
        raise typer.Exit(2) from None


@app.command()
def play(
    env: Annotated[str, typer.Argument(help="Environment, e.g. textcraft.")],
    task: Annotated[int, typer.Option(help="Task id to play.")] = 0,
    server: ServerOption = None,
    token: TokenOption = None,
    max_turns: Annotated[int | None, typer.Option(help="Turn limit (default: the env's).")] = None,
) -> None:
    """Play one episode yourself in the terminal.

    Example: agenttrain play textcraft --task 12
    """
    from agenttrain.envs.base import EnvError
    from agenttrain.play import play as play_episode

    try:
        asyncio.run(
            play_episode(
                env, task, servers=server or [], token=token, max_turns=max_turns, console=console
            )
        )
    except (EnvError, KeyError, RuntimeError) as problem:
        console.print(f"[red]error:[/] {problem}")
        raise typer.Exit(2) from None


@app.command()
def demo(
    split: Annotated[str, typer.Option(help="TextCraft split to play.")] = "test",
    concurrency: Annotated[int, typer.Option(min=1, help="Episodes in flight.")] = 16,
) -> None:
    """Run the embedded default end to end on this machine.

    Example: agenttrain demo
    """
    from agenttrain.demo import run_demo

    raise typer.Exit(run_demo(split=split, concurrency=concurrency, console=console))
