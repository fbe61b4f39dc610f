"""Oracle demonstrations of a few TextCraft training tasks (written by `agenttrain demos`)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from agenttrain.cli import app


def write_demos(folder, action_format: str):
    out = folder / f"demos-{action_format}.jsonl"
    result = CliRunner().invoke(
        app,
        [
            "demos",
            "--split",
            "train",
            "--tasks",
            "0-11",
            "--format",
            action_format,
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="session")
def demos_file(tmp_path_factory):
    """ReAct demonstrations (thought + action)."""
    return write_demos(tmp_path_factory.mktemp("demos"), "react")


@pytest.fixture(scope="session")
def adapt_demos_file(tmp_path_factory):
    """ADaPT-style demonstrations ('> think:' lines and '> action')."""
    return write_demos(tmp_path_factory.mktemp("demos"), "adapt")
