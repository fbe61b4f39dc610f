"""The `agenttrain` command. Each command is a thin wrapper over a module function; this
package holds one module a command group, and this file puts them in one app, in the order
`agenttrain --help` lists them."""

from __future__ import annotations

import inspect
from typing import Annotated

import typer

from agenttrain import __version__
from agenttrain.cli import memory, verl
from agenttrain.cli.data import data_command, demos, fewshot_pool
from agenttrain.cli.envs import list_envs, play, selfplay, serve
from agenttrain.cli.eval import compare, eval_command, show
from agenttrain.cli.eval_tables import SUMMARY_TITLES
from agenttrain.cli.eval_tables import summary_table as _summary_table
from agenttrain.cli.ops import doctor, launch
from agenttrain.cli.output import console
from agenttrain.cli.run import export, recipe, sft, train

# The eval tables' names, where tests/eval/test_eval_cli.py has always read them.
__all__ = ["SUMMARY_TITLES", "_summary_table", "app", "console", "run_cli"]

app = typer.Typer(
    help="Train LLM agents with online RL in AgentGym-style text environments.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_show_locals=False,
)
COMMANDS = {
    "envs": list_envs,
    "serve": serve,
    "play": play,
    "selfplay": selfplay,
    "eval": eval_command,
    "compare": compare,
    "show": show,
    "train": train,
    "launch": launch,
    "doctor": doctor,
    "sft": sft,
    "demos": demos,
    "recipe": recipe,
    "export": export,
    "data": data_command,
    "fewshot-pool": fewshot_pool,
}
"""Every command by name, in the order of `agenttrain --help`."""
for _name, _command in COMMANDS.items():
    app.command(_name)(_command)
app.add_typer(verl.app, name="verl")
app.add_typer(memory.app, name="memory")


def one_line_paragraphs(doc: str) -> str:
    """`doc` with each paragraph on one line, so `--help` wraps it to the terminal: Typer keeps
    a docstring's single line breaks, which left ragged half-lines at 80 columns. Lines that
    start a list item or are indented stay on their own."""
    paragraphs = []
    for paragraph in inspect.cleandoc(doc).split("\n\n"):
        lines = paragraph.split("\n")
        joined = [lines[0]]
        for line in lines[1:]:
            if line.startswith(("- ", "* ", " ")):
                joined.append(line)
            else:
                joined[-1] += " " + line
        paragraphs.append("\n".join(joined))
    return "\n\n".join(paragraphs)


for _app in (app, verl.app, memory.app):
    for _info in _app.registered_commands:
        _info.help = one_line_paragraphs(_info.help or inspect.getdoc(_info.callback) or "")


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


def run_cli() -> None:
    """The `agenttrain` command. An operating-system error that no command handled (a path
    that is a file, a read-only or full disk, a permission) is one `error:` line, not a
    traceback."""
    import errno
    import sys

    from rich.markup import escape

    try:
        app(prog_name="agenttrain")
    except OSError as problem:
        what = problem.strerror or str(problem)
        where = f": {problem.filename}" if problem.filename else ""
        hint = " (the disk is full)" if problem.errno == errno.ENOSPC else ""
        line = escape(f"{what}{where}{hint}")  # a path may hold brackets
        console.print(f"[red]error:[/] {line}", highlight=False, soft_wrap=True)  # copyable
        sys.exit(1)
