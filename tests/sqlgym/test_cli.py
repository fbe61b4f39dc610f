"""The bundled SQLGym set from the CLI: the oracle solves the whole test split through
`agenttrain eval`, and `agenttrain demos` writes its training episodes as SFT data."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from agenttrain.cli import app
from agenttrain.envs import get_spec


def test_the_oracle_solves_every_test_task(tmp_path):
    result = CliRunner().invoke(
        app, ["eval", "--env", "sqlgym", "--model", "oracle", "--out", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "oracle" / "summary.json").read_text())
    assert summary["episodes"] == len(get_spec("sqlgym").split("test"))
    assert (summary["success_rate"], summary["env_errors"], summary["format_error_rate"]) == (
        1.0,
        0,
        0.0,
    )
    assert set(summary["by_db_id"]) == {"airline", "bookshop", "clinic", "league", "school"}


def test_demos_are_oracle_episodes_of_training_tasks(tmp_path):
    out = tmp_path / "demos.jsonl"
    args = ["demos", "--env", "sqlgym", "--split", "train", "--tasks", "0-9", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    demos = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(demos) == 10
    train = set(get_spec("sqlgym").split("train"))
    assert all(d["task_id"] in train and d["reward"] == 1.0 for d in demos)
    assert all("```sql\nSELECT" in d["messages"][-1]["content"] for d in demos)
