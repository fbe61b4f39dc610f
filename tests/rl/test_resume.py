"""A killed run resumes from its last checkpoint and continues exactly; Ctrl-C saves and exits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agenttrain.run.tracking import read_metrics

RECIPE = Path(__file__).parents[2] / "configs" / "largest_grpo.yaml"
VOLATILE = ("timing_s/", "perf/")


def command(model_dir: Path, out_dir: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "agenttrain",
        "train",
        str(RECIPE),
        f"model.path={model_dir}",
        f"run.out_dir={out_dir}",
        "data.batch_tasks=4",
        "data.group_size=4",
        "trainer.total_steps=6",
        "trainer.save_freq=2",
        "trainer.test_freq=3",
        "trainer.val_tasks=8",
        "trainer.loggers=[jsonl]",
        "actor.entropy_coeff=0.05",
        *extra,
    ]


def comparable(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if not k.startswith(VOLATILE)} for row in rows]


def wait_for(path: Path, process: subprocess.Popen, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert process.poll() is None, process.stdout.read() if process.stdout else ""
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.05)


@pytest.mark.slow  # two training processes
def test_a_killed_run_resumes_and_reproduces_the_uninterrupted_metrics(tiny_model_dir, tmp_path):
    straight = tmp_path / "straight"
    subprocess.run(command(tiny_model_dir, straight), check=True, capture_output=True, timeout=600)
    expected = comparable(read_metrics(straight / "metrics.jsonl"))
    assert [row["step"] for row in expected] == [0, 1, 2, 3, 4, 5, 6]

    killed = tmp_path / "killed"
    process = subprocess.Popen(
        command(tiny_model_dir, killed), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    wait_for(killed / "checkpoints" / "step-2", process)
    process.send_signal(signal.SIGKILL)  # no chance to clean up: a crash
    process.wait()
    partial = read_metrics(killed / "metrics.jsonl")
    assert partial and partial[-1]["step"] < 6

    resumed = subprocess.run(
        command(tiny_model_dir, killed, "trainer.resume=auto"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "resuming" in resumed.stdout
    assert comparable(read_metrics(killed / "metrics.jsonl")) == expected


@pytest.mark.parametrize(
    ("signum", "code", "name"), [(signal.SIGINT, 130, "Ctrl-C"), (signal.SIGTERM, 143, "SIGTERM")]
)
@pytest.mark.slow  # over 9 s on 2 cores: the full suite only
def test_ctrl_c_and_sigterm_save_a_checkpoint_and_exit_cleanly(
    tiny_model_dir, tmp_path, signum, code, name
):
    out = tmp_path / "run"
    process = subprocess.Popen(
        command(tiny_model_dir, out, "trainer.total_steps=50", "trainer.save_freq=50"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    metrics = out / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while not (
        metrics.exists() and any('"step": 1' in line for line in metrics.read_text().splitlines())
    ):
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    process.send_signal(signum)
    output, _ = process.communicate(timeout=300)
    assert process.returncode == code, output
    assert f"{name}: finishing this step, then saving a checkpoint" in output
    # Piped output (a cluster log) has a plain line per step, not a bar drawn at the end.
    assert "training 1/50 · reward " in output
    steps = [row["step"] for row in read_metrics(metrics)]
    saved = sorted(p.name for p in (out / "checkpoints").glob("step-*"))
    assert saved == [f"step-{steps[-1]}"] and steps[-1] < 50
    assert "stopped at step" in output and "Checkpoint:" in output


@pytest.mark.slow  # over 9 s on 2 cores: the full suite only
def test_a_run_resumed_with_allowed_config_changes_keeps_the_old_config(tiny_model_dir, tmp_path):
    from typer.testing import CliRunner

    from agenttrain.cli import app

    out = tmp_path / "run"
    base = [*command(tiny_model_dir, out)[4:], "trainer.test_freq=0"]
    runner = CliRunner()
    first = runner.invoke(app, ["train", *base, "trainer.total_steps=1"])
    assert first.exit_code == 0, first.output
    resumed = runner.invoke(
        app,
        ["train", *base, "trainer.total_steps=2", "actor.lr=0.0001", "--allow-config-change"],
        env={"COLUMNS": "200"},
    )
    assert resumed.exit_code == 0, resumed.output
    assert "config changed since step 1: actor.lr 0.0005 -> 0.0001" in resumed.output
    old = (out / "config-history" / "config-step-1.yaml").read_text()
    assert "lr: 0.0005" in old and "total_steps: 1" in old
    assert "lr: 0.0001" in (out / "config.yaml").read_text()
    assert [row["step"] for row in read_metrics(out / "metrics.jsonl")] == [1, 2]
