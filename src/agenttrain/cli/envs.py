"""Environments: list them, serve one over AgentGym's protocol, play one, check the stack."""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated, Any

import typer
from rich.table import Table

from agenttrain.cli.options import (
    ConcurrencyOption,
    HostOption,
    LogLevelOption,
    ServerOption,
    TokenOption,
)
from agenttrain.cli.output import console, failure


def list_envs() -> None:
    """List the environments, whether they run here, their task splits, what each needs
    otherwise and the command that starts AgentGym's own server for it.

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
        runs = "[green]in-process[/]" if entry.in_process else "[yellow]AgentGym server[/]"
        notes.append(_environment_note(spec.name, entry.in_process, spec.requirements))
        options = entry.options() if entry.in_process else {}
        if options:
            listed = ", ".join(f"{k}={v!r}" for k, v in options.items())
            notes.append(f"  options (serve --env-kwarg K=V, env.kwargs): {listed}")
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
        console.print(note, highlight=False)


def _env_kwargs(pairs: list[str]) -> dict[str, Any]:
    """`KEY=VALUE` pairs as constructor options; values read as YAML (true, 3, 0.5, text)."""
    import yaml

    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--env-kwarg {pair!r}: expected KEY=VALUE, e.g. agentgym_compat=true")
        options[key.strip()] = yaml.safe_load(value) if value else ""
    return options


def _environment_note(name: str, in_process: bool, requirements: str) -> str:
    """One environment's line under `agenttrain envs`: where it runs, what it needs
    otherwise, and how AgentGym's own server for it starts."""
    from agenttrain.envs.agentgym import agentgym_server_command

    where = "runs here" if in_process else "not here"
    needs = f" ({requirements})" if requirements else ""
    command = agentgym_server_command(name)
    if command is None:
        return f"[bold]{name}[/]: {where}{needs}; AgentGym has no server for it"
    port = command.rsplit("--port ", 1)[-1]
    return (
        f"[bold]{name}[/]: {where}{needs}; AgentGym's server: `{command}`, "
        f"then --server http://127.0.0.1:{port}"
    )


def serve(
    env: Annotated[str, typer.Argument(help="Environment to serve, e.g. textcraft.")],
    host: HostOption = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port; 0 picks a free one.")] = 36001,
    max_sessions: Annotated[int, typer.Option(min=1, help="Live sessions allowed at once.")] = 1024,
    session_ttl: Annotated[
        float, typer.Option(min=1, help="Close sessions idle for this many seconds.")
    ] = 1800.0,
    token: TokenOption = None,
    log_level: LogLevelOption = "warning",
    access_log: Annotated[bool, typer.Option("--access-log", help="Log every request.")] = False,
    workers: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Run sessions in this many worker processes (SciWorld always does; default 4).",
        ),
    ] = None,
    env_kwarg: Annotated[
        list[str] | None,
        typer.Option(
            "--env-kwarg",
            help="An environment option KEY=VALUE (YAML value), repeatable; `agenttrain envs` "
            "lists each environment's options.",
        ),
    ] = None,
) -> None:
    """Serve an environment over AgentGym's HTTP protocol (unmodified AgentGym clients work).

    Example: agenttrain serve textcraft --host 127.0.0.1 --port 36001

    AgentGym's BabyAI exactly (its defects kept): agenttrain serve babyai --port 36005
    --env-kwarg agentgym_compat=true
    """
    from agenttrain.envs.base import EnvError
    from agenttrain.serving.runner import PortInUse
    from agenttrain.serving.runner import serve as run_server

    logging.basicConfig(level=log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    try:
        env_kwargs = _env_kwargs(env_kwarg or [])
        run_server(
            env,
            host=host,
            port=port,
            max_sessions=max_sessions,
            session_ttl_s=session_ttl,
            token=token,
            log_level=log_level,
            access_log=access_log,
            workers=workers,
            env_kwargs=env_kwargs,
        )
    except (PortInUse, ValueError, KeyError, EnvError) as problem:
        raise failure(problem) from None


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
        raise failure(problem) from None


def selfplay(
    split: Annotated[str, typer.Option(help="TextCraft split to play.")] = "test",
    concurrency: ConcurrencyOption = 16,
) -> None:
    """Check the environment stack: a TextCraft server, the oracle playing a split through it.

    Example: agenttrain selfplay --split test
    """
    from agenttrain.selfplay import run_demo

    raise typer.Exit(run_demo(split=split, concurrency=concurrency, console=console))
