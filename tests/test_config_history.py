"""Resuming a run with another config: refused unless harmless or asked for; history kept."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from agenttrain import config as config_io
from agenttrain.cli import app
from agenttrain.rl.config import TrainConfig
from agenttrain.run.history import (
    ConfigChanged,
    check_resume_config,
    config_changes,
    record_config,
)
from agenttrain.sft.config import SFTConfig

CONFIGS = Path(__file__).parents[1] / "configs"
runner = CliRunner()


def stored_run(run_dir: Path, model: type, recipe: str, *overrides: str) -> None:
    """A run folder as a stopped run leaves it: its config and a checkpoint."""
    config = config_io.load(model, CONFIGS / recipe, [f"run.out_dir={run_dir}", *overrides])
    (run_dir / "checkpoints" / "step-3").mkdir(parents=True)
    (run_dir / "config.yaml").write_text(config_io.dump(config))


def test_changed_keys_are_listed_with_old_and_new_values():
    old = {"actor": {"lr": 1e-5}, "trainer": {"total_steps": 5, "loggers": ["jsonl"]}}
    new = {"actor": {"lr": 1e-4}, "trainer": {"total_steps": 9, "loggers": ["jsonl"]}, "x": 1}
    assert config_changes(old, new) == {
        "actor.lr": (1e-5, 1e-4),
        "trainer.total_steps": (5, 9),
    }


def test_harmless_changes_pass_and_others_are_refused_with_their_values(tmp_path):
    stored_run(tmp_path, TrainConfig, "largest_grpo.yaml")
    base = config_io.load(TrainConfig, CONFIGS / "largest_grpo.yaml", [f"run.out_dir={tmp_path}"])
    longer = base.model_copy(deep=True)
    longer.trainer.total_steps += 10
    longer.env.servers = ["http://127.0.0.1:36001"]
    assert set(check_resume_config(tmp_path, longer.model_dump(mode="json"), False)) == {
        "trainer.total_steps",
        "env.servers",
    }
    bigger = base.model_copy(deep=True)
    bigger.data.group_size = 16
    with pytest.raises(ConfigChanged, match=r"data\.group_size: \d+ -> 16.*--allow-config-change"):
        check_resume_config(tmp_path, bigger.model_dump(mode="json"), False)
    assert "data.group_size" in check_resume_config(tmp_path, bigger.model_dump(mode="json"), True)


def test_a_key_an_older_version_did_not_write_counts_as_its_default(tmp_path):
    """A run folder from before a setting existed ran at its default: turning the setting on
    when resuming is a change (refused without --allow-config-change), leaving it is not."""
    stored_run(tmp_path, TrainConfig, "largest_grpo.yaml", "data.task_sampling=frontier")
    stored = yaml.safe_load((tmp_path / "config.yaml").read_text())
    del stored["data"]["frontier"]["replay"]  # as an older version wrote it
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(stored))
    same = config_io.load(TrainConfig, tmp_path / "config.yaml", [])
    assert check_resume_config(tmp_path, same.model_dump(mode="json"), False, TrainConfig) == {}
    replaying = config_io.load(TrainConfig, tmp_path / "config.yaml", ["data.frontier.replay=2"])
    with pytest.raises(ConfigChanged, match=r"data\.frontier\.replay: 0 -> 2"):
        check_resume_config(tmp_path, replaying.model_dump(mode="json"), False, TrainConfig)


def test_a_copied_run_folder_resumes_where_it_now_is(tmp_path):
    """A run copied to another folder (to branch it, or moved to another disk) continues with
    its stored config and the new run.out_dir, without --allow-config-change."""
    original, copy = tmp_path / "original", tmp_path / "copy"
    stored_run(original, TrainConfig, "largest_grpo.yaml")
    shutil.copytree(original, copy)
    config = config_io.load(TrainConfig, copy / "config.yaml", [f"run.out_dir={copy}"])
    changes = check_resume_config(copy, config.model_dump(mode="json"), False)
    assert changes == {"run.out_dir": (str(original), str(copy))}


@pytest.mark.parametrize(
    ("command", "model", "recipe"),
    [("train", TrainConfig, "largest_grpo.yaml"), ("sft", SFTConfig, "textcraft_sft.yaml")],
)
def test_a_copied_run_folders_config_as_it_is_would_not_continue_the_original(
    tmp_path, command, model, recipe
):
    """The copy's config.yaml still names the original folder: used as it is, it would train
    the original run further. Refused before anything loads, with both ways out, and the
    original run's checkpoints untouched."""
    original, copy = tmp_path / "original", tmp_path / "copy"
    stored_run(original, model, recipe)
    shutil.copytree(original, copy)
    result = runner.invoke(app, [command, str(copy / "config.yaml")], env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    output = "".join(result.output.split())
    assert f"run.out_dir={copy}" in output and f"run.out_dir={original}" in output
    assert sorted(p.name for p in (original / "checkpoints").iterdir()) == ["step-3"]


@pytest.mark.parametrize(
    ("command", "model", "recipe", "change"),
    [
        ("train", TrainConfig, "largest_grpo.yaml", "actor.lr=0.5"),
        ("sft", SFTConfig, "textcraft_sft.yaml", "optim.lr=0.5"),
    ],
)
def test_resuming_with_another_learning_rate_is_refused(tmp_path, command, model, recipe, change):
    stored_run(tmp_path, model, recipe)
    result = runner.invoke(
        app,
        [command, str(CONFIGS / recipe), f"run.out_dir={tmp_path}", change],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 2, result.output
    output = " ".join(result.output.split())
    assert "was trained with another config" in output and "-> 0.5" in output
    assert "--allow-config-change" in output


def test_an_earlier_config_is_kept_in_the_history(tmp_path):
    record_config(tmp_path, "a: 1\n", step=0)
    assert record_config(tmp_path, "a: 1\n", step=2) is None  # unchanged: nothing to keep
    kept = record_config(tmp_path, "a: 2\n", step=4)
    assert kept == tmp_path / "config-history" / "config-step-4.yaml"
    assert kept.read_text() == "a: 1\n"
    assert (tmp_path / "config.yaml").read_text() == "a: 2\n"
