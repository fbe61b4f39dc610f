"""`agenttrain eval --env babyai --model oracle`: the oracle as the CLI plays it."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from agenttrain.cli import app
from agenttrain.envs import get_spec
from agenttrain.envs.babyai.game import BabyAIGame
from agenttrain.envs.babyai.levels import task


def test_the_oracle_solves_a_test_task_that_starts_like_another(tmp_path):
    look_alike, played = 125, 163  # same first observation; 125's moves do not solve 163
    assert BabyAIGame(task(look_alike)).first_observation() == (
        BabyAIGame(task(played)).first_observation()
    )
    position = get_spec("babyai").split("test").index(played)
    args = ["--env", "babyai", "--model", "oracle", "--split", "test", "--tasks", str(position)]
    result = CliRunner().invoke(app, ["eval", *args, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    episode = json.loads((tmp_path / "oracle" / "episodes.jsonl").read_text())
    assert episode["task_id"] == played and episode["success"]
