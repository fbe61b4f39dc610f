"""Oracle demonstrations of a few TextCraft training tasks (written by `agenttrain demos`)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from agenttrain.cli import app


@pytest.fixture(scope="session")
def demos_file(tmp_path_factory):
    out = tmp_path_factory.mktemp("demos") / "demos.jsonl"
    result = CliRunner().invoke(
        app, ["demos", "--split", "train", "--tasks", "0-11", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    return out
