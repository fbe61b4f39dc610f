"""Options and arguments that several commands declare alike, declared once; the parsing of a
positions flag, and the errors of an evaluation's flags."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

ActionFormat = Literal["react", "adapt", "json", "raw"]
RecoveryStyle = Literal["plain", "inventory"]
RecoveryFrom = Literal["craft", "get", "both"]
"""`envs/textcraft/recovery.py`'s styles and slips (kept here so that the CLI does not import
envs)."""

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
HostOption = Annotated[str, typer.Option(help="Interface to bind; 0.0.0.0 exposes it.")]
LogLevelOption = Annotated[str, typer.Option(help="uvicorn log level.")]
SplitOption = Annotated[str, typer.Option(help="Task split, or 'all'.")]
DeviceOption = Annotated[str, typer.Option(help="cpu or cuda.")]
ConcurrencyOption = Annotated[int, typer.Option(min=1, help="Episodes in flight.")]
GrpoRecipeArgument = Annotated[
    Path, typer.Argument(help="YAML recipe, e.g. configs/textcraft_grpo.yaml.")
]
AllowConfigChangeOption = Annotated[
    bool,
    typer.Option(
        "--allow-config-change",
        help="Resume a run with settings other than its config.yaml (the old one is kept in "
        "config-history/). Not needed for trainer.total_steps, save/test/eval frequencies, "
        "loggers and env.servers.",
    ),
]


def positions(flag: str, text: str | None) -> list[int] | None:
    """A flag's positions list (`0-29,40`); a malformed one is a usage error naming the flag."""
    from agenttrain.eval.runner import parse_ranges

    if text is None:
        return None
    try:
        return parse_ranges(text)
    except ValueError as problem:
        raise typer.BadParameter(str(problem), param_hint=flag) from None


def usage_errors() -> tuple[type[Exception], ...]:
    """What an evaluation built from flags (eval, demos) is refused with: one error line, exit 2."""
    from pydantic import ValidationError

    from agenttrain.envs.base import EnvError
    from agenttrain.policy.base import PolicyError

    return (ValidationError, ValueError, KeyError, PolicyError, EnvError)
