"""`agenttrain envs` says for every environment where it runs, what it needs otherwise and how
AgentGym's own server for it starts."""

from __future__ import annotations

from typer.testing import CliRunner

from agenttrain.cli import app
from agenttrain.envs import registrations

runner = CliRunner()


def test_envs_gives_each_environment_its_needs_and_agentgym_server_command(monkeypatch):
    from agenttrain import cli

    monkeypatch.setattr(cli.console, "width", 400)  # one line per note
    result = runner.invoke(app, ["envs"])
    assert result.exit_code == 0, result.output
    notes = {line.split(":", 1)[0]: line for line in result.output.splitlines() if ": " in line}
    assert {r.spec.name for r in registrations()} <= set(notes)
    webshop = notes["webshop"]
    assert webshop.startswith("webshop: not here (needs WebShop's product data")
    assert (
        "`webshop --host 127.0.0.1 --port 36001`, then --server http://127.0.0.1:36001" in webshop
    )
    assert (
        "`AGENTENV_SQLGYM_BIRD_PATH=./bird sqlgym --host 127.0.0.1 --port 36002`" in notes["sqlgym"]
    )
    assert "`cd AgentGym/agentenv-textcraft && textcraft" in notes["textcraft"]
    assert notes["textcraft"].startswith("textcraft: runs here")
    assert notes["largest"].endswith("AgentGym has no server for it")
