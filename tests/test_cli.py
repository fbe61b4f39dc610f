"""The `agenttrain` command: envs, play and serve errors, as a user runs them."""

from __future__ import annotations

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from agenttrain.cli import app

runner = CliRunner()
AGENTTRAIN = [sys.executable, "-m", "agenttrain"]


def test_envs_lists_environments_their_availability_and_splits(monkeypatch):
    from agenttrain import cli

    monkeypatch.setattr(cli.console, "width", 160)  # a wide terminal: one line per environment
    result = runner.invoke(app, ["envs"])
    assert result.exit_code == 0, result.output
    line = next(row for row in result.output.splitlines() if "textcraft" in row)
    assert "in-process" in line and "train 400" in line and "test 100" in line
    assert "webshop" in result.output and "AgentGym server" in result.output


def test_play_solves_a_task_from_typed_actions():
    result = runner.invoke(
        app,
        ["play", "textcraft", "--task", "12"],
        input="get 3 wheat\ncraft 1 bread using 3 wheat\n",
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    assert "Goal: craft bread." in result.output
    assert "Crafted 1 minecraft:bread" in result.output
    assert "solved, reward 1 after 2 turns" in result.output


def test_play_stops_at_the_turn_limit_and_reports_it():
    result = runner.invoke(
        app,
        ["play", "textcraft", "--task", "12", "--max-turns", "2"],
        input="look\ninventory\nget 3 wheat\n",
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    assert "Could not execute look" in result.output
    assert "not solved, reward 0 after 2 turns" in result.output


def test_play_against_a_server(textcraft_url):
    result = subprocess.run(
        [*AGENTTRAIN, "play", "textcraft", "--task", "12", "--server", textcraft_url],
        input="get 3 wheat\ncraft 1 bread using 3 wheat\n",
        capture_output=True,
        text=True,
        timeout=60,
        env={"COLUMNS": "200", "PATH": ""},
    )
    assert result.returncode == 0, result.stderr
    assert textcraft_url in result.stdout
    assert "solved, reward 1 after 2 turns" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["serve", "textkraft"], "unknown environment 'textkraft' (did you mean 'textcraft'?)"),
        (["serve", "webshop"], "cannot be served from here"),
        (["play", "alfworld"], "--server URL"),
    ],
)
def test_bad_environment_choices_are_clear_errors(args, message):
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


@pytest.mark.parametrize(
    "command", ["envs", "serve", "play", "selfplay", "eval", "show", "train", "export"]
)
def test_every_command_documents_an_example(command):
    result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "Example: agenttrain" in result.output


@pytest.mark.parametrize(
    ("command", "paragraph"),
    [
        (
            ["eval"],
            "Episodes are kept as they end: after Ctrl-C (or SIGTERM) the same command with the "
            "same --out plays only the missing ones.",
        ),
        (
            ["sft"],
            "Reads agenttrain trajectories (from `demos` or `eval`), AgentGym AgentTraj or chat "
            "JSONL; writes checkpoints that `agenttrain train model.path=...` continues from.",
        ),
    ],
)
def test_help_paragraphs_wrap_to_the_terminal_not_to_the_docstring(command, paragraph):
    """A docstring's line breaks used to survive into --help, leaving half-lines at 80
    columns; each paragraph is now one line wherever the terminal is wide enough. Run as a
    user runs it, in a new process: in-process, the help came out 80 columns wide in some
    xdist orders, whatever COLUMNS said (state left by an earlier test in the worker)."""
    result = subprocess.run(
        [*AGENTTRAIN, *command, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**__import__("os").environ, "COLUMNS": "200"},
    )
    assert result.returncode == 0, result.stderr
    assert paragraph in [line.strip() for line in result.stdout.splitlines()]


def test_selfplay_checks_the_whole_environment_stack():
    result = subprocess.run(
        [*AGENTTRAIN, "selfplay", "--split", "val"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**__import__("os").environ, "COLUMNS": "200"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "44 (100%)" in result.stdout  # every validation task solved through the server


def _commands(group, ctx):
    import click

    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            yield from _commands(command, ctx)
        else:
            yield command


def test_off_by_default_flags_have_no_negative_form_widening_the_help():
    """`--replace/--no-replace` put a third column of `--no-...` names into every option table,
    which left the help text ~14 characters at 80 columns; a flag that is off by default is
    turned on by its name and needs no `--no-` form."""
    import click
    import typer

    group = typer.main.get_command(app)
    ctx = click.Context(group)
    negatives = [
        f"{command.name} {param.opts[0]}"
        for command in _commands(group, ctx)
        for param in command.params
        if param.secondary_opts and param.default is False
    ]
    assert negatives == []
