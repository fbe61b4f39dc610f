"""`python -m agenttrain` is the `agenttrain` command."""

from agenttrain.cli import run_cli

run_cli()
