"""`python -m agenttrain` is the `agenttrain` command."""

from agenttrain.cli import app

app(prog_name="agenttrain")
