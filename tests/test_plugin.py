"""A third-party environment installed as a plug-in package: the path an outside author takes.

The plug-in (tests/plugins/agenttrain_echo, the template of docs/environments.md) is installed
into a temporary site dir as pip would lay it out, with an `agenttrain.envs` entry point, and
used from a fresh `agenttrain` process: listed, then trained on with constructor kwargs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agenttrain.run.tracking import read_metrics

PLUGIN = Path(__file__).parent / "plugins" / "agenttrain_echo"
RECIPE = Path(__file__).parents[1] / "configs" / "largest_grpo.yaml"


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A site dir holding the plug-in's package and its `*.dist-info` with the entry point."""
    site = tmp_path / "site"
    shutil.copytree(PLUGIN, site / "agenttrain_echo", ignore=shutil.ignore_patterns("__pycache__"))
    info = site / "agenttrain_echo-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: agenttrain-echo\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[agenttrain.envs]\necho = agenttrain_echo:register\n")
    return site


def agenttrain(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the `agenttrain` command in a process that has the plug-in on its path."""
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "agenttrain", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": path, "COLUMNS": "200"},
        timeout=600,
    )


def train_args(model_dir: Path, out_dir: Path, kwargs: str) -> list[str]:
    return [
        "train",
        str(RECIPE),
        f"model.path={model_dir}",
        f"run.out_dir={out_dir}",
        "env.name=echo",
        f"env.kwargs={kwargs}",
        "data.batch_tasks=2",
        "data.group_size=2",
        "trainer.total_steps=1",
        "trainer.test_freq=0",
        "trainer.loggers=[jsonl]",
    ]


def test_an_installed_plugin_is_listed_with_its_splits(site):
    result = agenttrain(site, "envs")
    assert result.returncode == 0, result.stderr
    [row] = [line for line in result.stdout.splitlines() if " echo " in line]
    assert "in-process" in row and "train 800 · val 100 · test 100" in row


@pytest.mark.slow  # an `agenttrain train` subprocess
def test_one_training_step_runs_on_the_plugin_built_with_env_kwargs(site, tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    result = agenttrain(site, *train_args(tiny_model_dir, out, "{words: 2}"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert [row["step"] for row in read_metrics(out / "metrics.jsonl")] == [1]
    lines = (out / "trajectories" / "step-000001.jsonl").read_text().splitlines()
    episodes = [json.loads(line) for line in lines]
    assert len(episodes) == 4
    for episode in episodes:
        assert episode["task_info"]["words"] == 2  # the kwargs reached the environment
        question = next(
            m["content"] for m in episode["messages"] if "Repeat exactly:" in m["content"]
        )
        assert len(question.split("Repeat exactly:")[1].split()) == 2


@pytest.mark.slow  # an `agenttrain train` subprocess
def test_a_misspelt_env_kwarg_names_the_plugin_and_its_parameters(site, tiny_model_dir, tmp_path):
    result = agenttrain(site, *train_args(tiny_model_dir, tmp_path / "run", "{word: 2}"))
    assert result.returncode != 0
    assert "'echo' takes no parameter 'word'; accepted parameters: words" in (
        result.stdout + result.stderr
    )
