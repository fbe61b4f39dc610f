"""A checkpoint records how its model was trained to act; `eval --model RUN` asks the same."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from agenttrain.cli import app
from agenttrain.eval.runner import recorded_settings
from rl.tiny_runs import recipe
from rl.tiny_runs import train as train_run

runner = CliRunner()


def fake_checkpoint(folder, **generation):
    (folder / "model").mkdir(parents=True)
    (folder / "model" / "config.json").write_text("{}")
    meta = {"step": 1, "base_model": "x", "adapter": False, "generation": generation}
    (folder / "model" / "agenttrain.json").write_text(json.dumps(meta))
    return str(folder)


def test_a_trained_run_is_evaluated_with_its_format_and_limits(tiny_model_dir, tmp_path):
    run = tmp_path / "run"
    train_run(recipe(tiny_model_dir, run, "trainer.total_steps=1", "trainer.test_freq=0"))
    meta = json.loads((run / "checkpoints" / "step-1" / "model" / "agenttrain.json").read_text())
    assert meta["generation"] == {
        "env": "largest",
        "action_format": "raw",
        "prompt_style": "agenttrain",
        "max_new_tokens": 16,
        "max_context": 512,
    }
    out = tmp_path / "eval"
    result = runner.invoke(
        app,
        ["eval", "--model", str(run), "--split", "val", "--tasks", "0-1", "--out", str(out)],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    assert (
        "as the checkpoint was trained: --env largest, --format raw, --prompt-style agenttrain, "
        "--max-new-tokens 16, --max-context 512" in " ".join(result.output.split())
    )
    used = json.loads((out / "config.json").read_text())
    assert used["env"] == "largest"
    assert used["rollout"]["action_format"] == "raw" and used["rollout"]["max_new_tokens"] == 16


def test_a_flag_wins_and_checkpoints_that_disagree_need_one(tmp_path):
    react = fake_checkpoint(tmp_path / "a", action_format="react", max_new_tokens=64)
    raw = fake_checkpoint(tmp_path / "b", action_format="raw", max_new_tokens=64)
    assert recorded_settings(["smollm2-135m", react], {}) == {
        "action_format": "react",
        "max_new_tokens": 64,
    }
    assert recorded_settings([react], {"max_new_tokens": 8}) == {"action_format": "react"}
    with pytest.raises(ValueError, match=r"different --format values.*pass --format"):
        recorded_settings([react, raw], {})
    assert recorded_settings([react, raw], {"action_format": "json"}) == {"max_new_tokens": 64}
