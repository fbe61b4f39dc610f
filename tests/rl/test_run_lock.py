"""One writer per run folder: a second `train` on a folder in use fails at once; a lock left
by a killed run is taken over (issue 28: two runs used to interleave one metrics.jsonl)."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from agenttrain.run.lock import LOCK_FILE
from rl.test_resume import command, wait_for


def run(args, timeout=300):
    return subprocess.run(
        args, capture_output=True, text=True, timeout=timeout, env={**os.environ, "COLUMNS": "300"}
    )


@pytest.mark.slow  # three training processes
def test_a_second_writer_is_refused_and_a_dead_writers_lock_is_taken_over(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    first = subprocess.Popen(
        command(tiny_model_dir, out, "trainer.total_steps=200", "trainer.save_freq=200"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for(out / "metrics.jsonl", first)  # it holds the folder and is training
        second = run(command(tiny_model_dir, out, "trainer.total_steps=200"))
        output = " ".join((second.stdout + second.stderr).split())
        assert second.returncode == 2, output
        assert f"error: {out} is being written by another run: PID {first.pid}" in output
        assert "Traceback" not in output
        rows = (out / "metrics.jsonl").read_text().splitlines()
        assert sum('"step": 0,' in row for row in rows) == 1  # one writer
    finally:
        first.send_signal(signal.SIGKILL)  # a crash: its lock stays behind
        first.wait()
    assert (out / LOCK_FILE).exists()
    third = run(command(tiny_model_dir, out, "trainer.total_steps=1", "trainer.resume=never"))
    output = " ".join((third.stdout + third.stderr).split())
    assert third.returncode == 0, output
    assert f"taking over the lock of PID {first.pid}, which is no longer running" in output
    assert not (out / LOCK_FILE).exists()  # released at the end
