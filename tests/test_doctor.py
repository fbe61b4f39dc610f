"""`agenttrain doctor`: each failure a run would meet is named with its fix, before the run,
checked against real servers on loopback."""

from __future__ import annotations

import importlib.util
import socket

import pytest
import yaml
from typer.testing import CliRunner

from agenttrain.cli import app
from agenttrain.config import load
from agenttrain.doctor import diagnose, environment_checks, extras_checks, java_check
from agenttrain.rl.config import EnvConfig, TrainConfig

runner = CliRunner()


@pytest.fixture(autouse=True)
def wide_console(monkeypatch):
    """The table's cells wrap on a narrow terminal (CI); the assertions read whole lines."""
    from agenttrain import cli

    monkeypatch.setattr(cli.console, "width", 400)


WIDE = {"COLUMNS": "600"}  # one line per check: no path split by wrapping


def write_config(folder, env: dict, **sections) -> str:
    """A training config on the tiny model, writing into `folder`."""
    config = {
        "run": {"out_dir": str(folder / "run")},
        "env": env,
        "trainer": {"loggers": ["console", "jsonl"]},
        **sections,
    }
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def doctor(*args: str):
    result = runner.invoke(app, ["doctor", *args], env=WIDE)
    return result, " ".join(result.output.split())


def test_a_dead_server_is_named_with_how_to_start_it(tmp_path, tiny_model_dir):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    config = write_config(tmp_path, {"name": "textcraft", "servers": [url]})
    result, text = doctor(config, f"model.path={tiny_model_dir}")
    assert result.exit_code == 1, result.output
    assert f"server textcraft {url}" in text and "FAIL" in text
    assert "nothing answers: /: ClientConnectorError" in text
    assert f"agenttrain serve textcraft --port {port}" in text and f"curl {url}/" in text
    assert "1 of" in text and "checks failed" in text


def test_a_server_of_another_environment_is_named(tmp_path, tiny_model_dir, textcraft_url):
    config = write_config(tmp_path, {"name": "babyai", "servers": [textcraft_url]})
    result, text = doctor(config, f"model.path={tiny_model_dir}")
    assert result.exit_code == 1, result.output
    assert f"{textcraft_url} is not a babyai server" in text
    assert "'This is environment TextCraft.'" in text and "'This is environment BabyAI.'" in text
    assert "another environment's server holds this port" in text


def test_server_flag_checks_that_server_for_the_named_environment(tiny_model_dir, textcraft_url):
    result, text = doctor(
        f"model.path={tiny_model_dir}", "--env", "babyai", "--server", textcraft_url
    )
    assert result.exit_code == 1 and f"{textcraft_url} is not a babyai server" in text


def test_everything_in_place_exits_0(tmp_path, tiny_model_dir, textcraft_url):
    config = write_config(tmp_path, {"name": "textcraft", "servers": [textcraft_url]})
    result, text = doctor(config, f"model.path={tiny_model_dir}")
    assert result.exit_code == 0, result.output
    assert f"server textcraft {textcraft_url}" in text and "answers as textcraft" in text
    assert "FAIL" not in text and "checks passed" in text
    assert f"model {tiny_model_dir}" in text and "extra peft" in text and "disk " in text


def test_a_batch_too_large_for_memory_says_what_to_lower(tmp_path, tiny_model_dir):
    overrides = [f"model.path={tiny_model_dir}", "actor.micro_batch_tokens=10000000"]
    config = load(TrainConfig, None, [*overrides, f"run.out_dir={tmp_path}"])
    (memory,) = [check for check in diagnose(config) if check.name.startswith("memory")]
    assert memory.status == "fail" and "actor.micro_batch_tokens" in memory.fix


def test_a_model_that_names_nothing_fails_with_its_fix(tmp_path):
    config = write_config(tmp_path, {"name": "textcraft"})
    result, text = doctor(config, f"model.path={tmp_path / 'missing'}")
    assert result.exit_code == 1
    assert f"unknown model '{tmp_path / 'missing'}'" in text and "set model.path" in text


def test_sciworld_without_java_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no java on it
    check = java_check()
    assert check.status == "fail" and "apt-get install -y default-jre-headless" in check.fix
    names = [c.name for c in environment_checks(EnvConfig(name="sciworld"))]
    assert names == ["environment sciworld", "java (SciWorld)"]


def test_an_extra_the_config_uses_but_lacks_is_named(monkeypatch):
    real_find_spec = importlib.util.find_spec

    def without_mlflow(name, *args):
        return None if name == "mlflow" else real_find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without_mlflow)
    config = load(TrainConfig, None, ["trainer.loggers=[console,mlflow]"])
    (mlflow,) = [check for check in extras_checks(config, verl=False) if "mlflow" in check.name]
    assert mlflow.status == "fail" and "trainer.loggers has mlflow" in mlflow.detail
    assert "pip install" in mlflow.fix


def test_an_unknown_split_is_named():
    (check,) = environment_checks(EnvConfig(name="textcraft", split="tset"))
    assert check.status == "fail" and "no split 'tset'" in check.detail
