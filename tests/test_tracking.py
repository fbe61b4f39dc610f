"""metrics.jsonl holds each step once, across reruns and resumes (issue 28)."""

from __future__ import annotations

import json

import pytest
import torch

from agenttrain.run.tracking import Tracker, device_memory, read_metrics


def write_rows(path, steps):
    path.write_text("".join(json.dumps({"step": step, "loss": 1.0}) + "\n" for step in steps))


def test_a_rerun_without_a_checkpoint_starts_the_metrics_over(tmp_path):
    write_rows(tmp_path / "metrics.jsonl", [0])  # a first attempt failed before its first save
    tracker = Tracker(["jsonl"], tmp_path, "run", {}, resume_step=0)
    tracker.log({"val/success_rate": 0.5}, step=0)
    tracker.close()
    assert [row["step"] for row in read_metrics(tmp_path / "metrics.jsonl")] == [0]


def test_a_resumed_run_keeps_the_steps_up_to_its_checkpoint(tmp_path):
    write_rows(tmp_path / "metrics.jsonl", [0, 1, 2, 3])  # checkpoint at 2, step 3 lost
    tracker = Tracker(["jsonl"], tmp_path, "run", {}, resume_step=2)
    tracker.log({"loss": 0.5}, step=3)
    tracker.close()
    assert [row["step"] for row in read_metrics(tmp_path / "metrics.jsonl")] == [0, 1, 2, 3]


def test_no_accelerator_memory_is_reported_on_the_cpu():
    assert device_memory("cpu") == {}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="reads CUDA memory: needs a GPU")
def test_peak_cuda_memory_covers_what_was_allocated():
    held = torch.empty(2**28, dtype=torch.uint8, device="cuda")  # 0.25 GiB
    memory = device_memory("cuda")
    assert memory["perf/max_memory_allocated_gb"] >= 0.25
    assert memory["perf/max_memory_reserved_gb"] >= memory["perf/max_memory_allocated_gb"]
    del held
