"""One run over several environments: a weighted, resumable task stream, each environment
with its own prompts, action format and turn limit, and per-environment metrics."""

from __future__ import annotations

import json

import pytest

from agenttrain.config import ConfigError, load
from agenttrain.rl.config import TrainConfig
from agenttrain.rl.trainer import Trainer
from agenttrain.run.tracking import read_metrics

MIX = """
envs:
  - {name: largest, weight: 2, action_format: raw}
  - {name: textcraft, weight: 1, action_format: react, max_turns: 2}
rollout: {max_new_tokens: 16, max_context: 1024}
data: {batch_tasks: 3, group_size: 2}
trainer: {total_steps: 1, test_freq: 1, val_tasks: 2, loggers: [jsonl]}
"""


def mixed(tmp_path, model_dir, *overrides) -> TrainConfig:
    recipe = tmp_path / "mix.yaml"
    recipe.write_text(MIX)
    return load(
        TrainConfig,
        recipe,
        [f"model.path={model_dir}", f"run.out_dir={tmp_path / 'run'}", *overrides],
    )


def test_the_task_stream_mixes_environments_by_weight(tiny_model_dir, tmp_path):
    trainer = Trainer(mixed(tmp_path, tiny_model_dir))
    slots = [trainer.environments.slot(i) for i in range(30)]
    envs = [slot.env for slot in slots]
    assert envs.count("largest") == 20 and envs.count("textcraft") == 10
    assert all(envs[i : i + 3].count("largest") == 2 for i in range(0, 30, 3))  # every round
    textcraft = [slot.task for slot in slots if slot.env == "textcraft"]
    assert len(set(textcraft)) == 10  # walking through its own shuffled split
    again = Trainer(mixed(tmp_path, tiny_model_dir)).environments.slot(17)
    assert again == slots[17]  # a pure function of the seed and the position


def test_a_mixed_step_plays_each_environment_its_way_and_reports_each(tiny_model_dir, tmp_path):
    rows = {row["step"]: row for row in _train(mixed(tmp_path, tiny_model_dir))}
    step = rows[1]
    assert step["env/largest/episodes"] == 4 and step["env/textcraft/episodes"] == 2
    assert "env/largest/success_rate" in step and "env/textcraft/success_rate" in step
    assert "val/largest/success_rate" in rows[0] and "val/textcraft/success_rate" in rows[0]
    assert "val/success_rate" in rows[0]
    episodes = [
        json.loads(line)
        for line in (tmp_path / "run" / "trajectories" / "step-000001.jsonl")
        .read_text()
        .split("\n")
        if line
    ]
    textcraft = [e for e in episodes if e["env"] == "textcraft"]
    assert textcraft and all(e["num_turns"] <= 2 for e in textcraft)  # its own turn limit
    assert "Thought" in textcraft[0]["messages"][0]["content"]  # its own (react) prompt
    assert len({e["group_id"] for e in episodes}) == 3


def _train(config: TrainConfig) -> list[dict]:
    Trainer(config).train()
    return read_metrics(config.run.out_dir / "metrics.jsonl")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["env.name=largest"], "either env .* or envs"),
        (["envs=[largest, largest]"], "twice"),
    ],
)
def test_bad_environment_lists_are_refused(tmp_path, extra, message):
    recipe = tmp_path / "bad.yaml"
    recipe.write_text("envs: [largest, textcraft]\n" if "envs" not in extra[0] else "{}\n")
    with pytest.raises(ConfigError, match=message):
        load(TrainConfig, recipe, extra)
