"""What a launch would start, decided before anything runs: refusals name the key at fault."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agenttrain.cli import app
from agenttrain.config import ConfigError, load
from agenttrain.launcher.services import LaunchError, plan_services, server_overrides
from agenttrain.rl.config import TrainConfig
from agenttrain.serving.runner import bind

RECIPE = Path(__file__).parents[2] / "configs" / "largest_grpo.yaml"


def config(*overrides: str) -> TrainConfig:
    return load(TrainConfig, None, list(overrides))


def test_free_ports_are_distinct_and_the_training_gets_every_url():
    chosen = config(
        "envs=[textcraft, {name: largest, servers: ['http://elsewhere:1']}, babyai]",
        "launch.servers={textcraft: {count: 3}}",
    )
    services = plan_services(chosen)
    assert [s.name for s in services] == [f"textcraft-{i}" for i in (1, 2, 3)] + ["babyai-1"]
    assert len({s.port for s in services}) == 4
    [override] = server_overrides(chosen, services)
    key, value = override.split("=", 1)
    servers = {entry["name"]: entry["servers"] for entry in json.loads(value)}
    assert key == "envs"
    assert servers == {
        "textcraft": [s.url for s in services[:3]],
        "largest": ["http://elsewhere:1"],  # given in the config: used as it is
        "babyai": [services[3].url],
    }
    config("envs=[textcraft, babyai]", "launch.servers={textcraft: {count: 3}}", override)


def test_configured_ports_are_kept_and_checked_against_the_server_identity():
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    sock.close()
    [service] = plan_services(config(f"launch.servers={{textcraft: {{ports: [{port}]}}}}"))
    assert service.port == port and service.command[-2:] == ("--port", str(port))
    assert (service.identity_route, service.identity_text) == (
        "/",
        "This is environment TextCraft.",
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["launch.servers={babyai: {count: 2}}"],
            "launch.servers.babyai: babyai is not an environment of this run",
        ),
        (
            ["env.servers=[http://a:1]", "launch.servers={textcraft: {count: 2}}"],
            "the config already lists servers for textcraft",
        ),
        (["env.name=alfworld"], "alfworld cannot be served by `agenttrain serve`"),
        (
            ["memory.enabled=true", "launch.memory={enabled: true, url_key: memory.adress}"],
            "launch.memory.url_key: unknown key 'memory.adress'; allowed in memory: enabled",
        ),
    ],
)
def test_a_launch_that_cannot_run_is_refused_before_anything_starts(overrides, message):
    with pytest.raises(LaunchError) as refusal:
        plan_services(config(*overrides))
    assert message in str(refusal.value)


def test_ports_and_count_must_agree():
    with pytest.raises(ConfigError, match="count=3 but 2 ports are listed"):
        config("launch.servers={textcraft: {count: 3, ports: [40001, 40002]}}")


def test_the_command_refuses_in_one_line_what_cannot_launch(tmp_path):
    runner = CliRunner()
    unknown = runner.invoke(app, ["launch", str(RECIPE), "env.name=nosuch"])
    assert unknown.exit_code == 2
    assert "error: unknown environment 'nosuch'" in " ".join(unknown.output.split())
    missing = runner.invoke(app, ["launch", "--status", str(tmp_path)])
    assert missing.exit_code == 2 and "no launch in" in missing.output
    both = runner.invoke(app, ["launch", str(RECIPE), "--stop", str(tmp_path)])
    assert both.exit_code == 2 and "give a CONFIG to launch, or one of" in both.output
