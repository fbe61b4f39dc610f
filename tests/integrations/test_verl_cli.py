"""`agenttrain data`, `agenttrain verl config` and `agenttrain verl train` as a user runs them."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from agenttrain.cli import app
from agenttrain.envs import get_spec
from agenttrain.integrations.verl.settings import AGENT_NAME, LOOP_TARGET, LoopSettings

runner = CliRunner()
WIDE = {"COLUMNS": "200"}
RECIPE = str(Path(__file__).resolve().parents[2] / "configs" / "textcraft_grpo.yaml")
INSTALL = "pip install 'agenttrain[verl]'"


def test_agentgym_id_list_names_tasks_as_agentgym_does(tmp_path):
    args = ["data", "--env", "textcraft", "--split", "test", "--format", "agentgym"]
    result = runner.invoke(app, [*args, "--tasks", "0-2", "--out", str(tmp_path)], env=WIDE)
    assert result.exit_code == 0, result.output
    assert "of the test split" in result.output
    ids = get_spec("textcraft").split("test")[:3]
    items = json.loads((tmp_path / "textcraft_test.json").read_text())
    assert items == [{"item_id": f"textcraft_{task_id}"} for task_id in ids]


def test_parquet_without_pyarrow_names_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as where the extra is not installed
    result = runner.invoke(
        app, ["data", "--env", "largest", "--format", "verl", "--out", str(tmp_path)], env=WIDE
    )
    assert result.exit_code == 2
    assert "needs pyarrow" in result.output and INSTALL in result.output
    assert not list(tmp_path.iterdir())


def test_an_unknown_split_lists_the_splits(tmp_path):
    result = runner.invoke(
        app, ["data", "--env", "textcraft", "--split", "dev", "--out", str(tmp_path)], env=WIDE
    )
    assert result.exit_code == 2
    assert "splits: train, val, test" in result.output


def test_verl_train_without_verl_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "verl", None)
    result = runner.invoke(app, ["verl", "train", RECIPE, "--dry-run"], env=WIDE)
    assert result.exit_code == 2
    assert INSTALL in result.output


def verl_config(smollm2_dir: Path, tmp_path: Path, *extra: str):
    args = ["verl", "config", RECIPE, f"model.path={smollm2_dir}", f"run.out_dir={tmp_path}/run"]
    return runner.invoke(app, [*args, "--data-dir", str(tmp_path / "data"), *extra], env=WIDE)


def test_verl_config_prints_quoted_overrides_and_what_verl_cannot_follow(smollm2_dir, tmp_path):
    result = verl_config(smollm2_dir, tmp_path, "run.name=grpo try 2", "--gpus", "8")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    title = next(i for i, line in enumerate(lines) if "keys verl cannot follow" in line)
    printed = [shlex.split(line) for line in lines[:title]]
    assert all(len(words) == 1 for words in printed), "one shell word per override"
    overrides = [words[0] for words in printed]
    assert "trainer.experiment_name='grpo try 2'" in overrides
    assert "trainer.n_gpus_per_node=8" in overrides
    assert "actor_rollout_ref.rollout.n=4" in overrides
    table = "\n".join(lines[title:])
    assert "algorithm.epsilon" in table and "trainer.max_env_error_rate" in table
    assert "differs" in table

    entry = yaml.safe_load((tmp_path / "data" / "agent_loop.yaml").read_text())
    assert len(entry) == 1 and entry[0]["name"] == AGENT_NAME
    assert entry[0]["_target_"] == LOOP_TARGET
    settings = LoopSettings(**{k: v for k, v in entry[0].items() if k not in ("name", "_target_")})
    assert (settings.max_turns, settings.max_new_tokens) == (10, 96)
    assert not list((tmp_path / "data").glob("*.parquet"))


def test_verl_config_writes_the_train_and_validation_data_when_asked(smollm2_dir, tmp_path):
    parquet = pytest.importorskip("pyarrow.parquet", reason="agenttrain[verl] not installed")
    result = verl_config(smollm2_dir, tmp_path, "--write-data")
    assert result.exit_code == 0, result.output
    spec = get_spec("textcraft")
    for split in ("train", "val"):
        table = parquet.read_table(tmp_path / "data" / f"textcraft_{split}.parquet")
        assert table.num_rows == len(spec.split(split))
        assert f"{split} split: {table.num_rows} tasks" in result.output


def test_a_recipe_verl_cannot_run_is_refused_before_anything_is_written(smollm2_dir, tmp_path):
    result = verl_config(smollm2_dir, tmp_path, "actor.mini_batch_episodes=6")
    assert result.exit_code == 2
    assert "not a multiple of data.group_size=4" in result.output
    assert not (tmp_path / "data").exists()


def test_verl_train_dry_run_prints_the_command_and_writes_nothing(smollm2_dir, tmp_path):
    pytest.importorskip("verl", reason="agenttrain[verl] not installed (make setup installs it)")
    args = ["verl", "train", RECIPE, f"model.path={smollm2_dir}", f"run.out_dir={tmp_path}/run"]
    options = ["--ray-address", "auto", "--dry-run", "--verl", "trainer.val_before_train=false"]
    result = runner.invoke(app, [*args, *options], env=WIDE)
    assert result.exit_code == 0, result.output
    words = shlex.split(result.output.strip())
    assert words[0] == "RAY_ADDRESS=auto"
    assert words[1:4] == [sys.executable, "-m", "verl.trainer.main_ppo"]
    assert words[-1] == "trainer.val_before_train=false"  # the user's override comes last
    assert f"data.train_files=[{tmp_path}/run/verl/textcraft_train.parquet]" in words
    assert not (tmp_path / "run").exists()


def test_first_observation_is_refused_for_agentgym_id_lists(tmp_path):
    args = ["data", "--env", "textcraft", "--format", "agentgym", "--first-observation"]
    result = runner.invoke(app, [*args, "--out", str(tmp_path)], env=WIDE)
    assert result.exit_code == 2
    assert "--first-observation applies to --format verl only" in result.output


def test_paths_are_absolute_and_a_machine_local_base_model_is_pointed_out(
    smollm2_dir, tmp_path, monkeypatch
):
    """Issue 28: a relative adapter path and this machine's model cache are useless on a
    cluster's nodes."""
    monkeypatch.chdir(tmp_path)
    result = verl_config(smollm2_dir, tmp_path)
    assert result.exit_code == 0, result.output
    words = [shlex.split(line)[0] for line in result.output.splitlines() if "=" in line[:80]]
    model = next(w for w in words if w.startswith("actor_rollout_ref.model.path="))
    assert Path(model.split("=", 1)[1]).is_absolute()
    squeezed = "".join(result.output.split())
    assert "note:thebasemodelisthismachine'sconvertedcopy" in squeezed
    assert "--verlactor_rollout_ref.model.path=<aHubidorapaththeyshare>" in squeezed
