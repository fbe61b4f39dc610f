"""The console every command prints to, and the one-line errors that end a command."""

from __future__ import annotations

import typer
from rich.console import Console

console = Console()


def failure(problem: object, code: int = 2, *, highlight: bool | None = None) -> typer.Exit:
    """Print `error: <problem>` (markup in it applies) as one unwrapped line, so the paths
    in it stay copyable; the exit to raise (default status 2)."""
    console.print(f"[red]error:[/] {problem}", highlight=highlight, soft_wrap=True)
    return typer.Exit(code)


def refusal(problem: object) -> typer.Exit:
    """Print one unwrapped error line (messages hold brackets and install commands); the exit
    (status 2) to raise."""
    from rich.markup import escape

    console.print(f"[red]error:[/] {escape(str(problem))}", soft_wrap=True)
    return typer.Exit(2)
