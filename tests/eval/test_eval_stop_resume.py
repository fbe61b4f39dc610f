"""`agenttrain eval` keeps what it finished: Ctrl-C or SIGTERM stops cleanly, the same command
continues with the missing episodes, and another evaluation's folder is not mixed in
(issue 28 items 6 and 7). Real processes and real signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from agenttrain.eval.runner import slug

TOTAL = 80  # 40 test tasks x 2 samples: more than the 32 in flight, stopped after 3 finish


def eval_command(model_dir, out, *extra):
    return [
        sys.executable, "-m", "agenttrain", "eval", "--env", "textcraft", "--split", "test",
        "--model", str(model_dir), "--tasks", "0-39", "-n", "2", "--max-turns", "6",
        "--max-new-tokens", "32", "--out", str(out), *extra,
    ]  # fmt: skip


def run(args):
    done = subprocess.run(
        args, capture_output=True, text=True, timeout=600, env={**os.environ, "COLUMNS": "300"}
    )
    return done.returncode, " ".join((done.stdout + done.stderr).split())


def keys(path):
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [(r["task_id"], r["seed"], r["sample"]) for r in rows]


@pytest.mark.slow  # two evaluation processes
@pytest.mark.parametrize(
    ("signum", "code", "workers"),
    [(signal.SIGINT, 130, "1"), (signal.SIGTERM, 143, "1"), (signal.SIGINT, 130, "2")],
)
def test_a_stopped_eval_keeps_its_episodes_and_the_same_command_finishes_it(
    tiny_model_dir, tmp_path, signum, code, workers
):
    out = tmp_path / "eval"
    partial = out / slug(str(tiny_model_dir)) / "episodes.partial.jsonl"
    process = subprocess.Popen(
        eval_command(tiny_model_dir, out, "--workers", workers),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "COLUMNS": "300"},
    )
    deadline = time.monotonic() + 300
    while not (partial.exists() and len(partial.read_text().splitlines()) >= 3):
        assert process.poll() is None, process.stdout.read()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    process.send_signal(signum)
    output = " ".join(process.communicate(timeout=120)[0].split())
    assert process.returncode == code, output
    assert "finished episodes are kept in" in output and "run the same command again" in output
    assert "Traceback" not in output and "Event loop is closed" not in output
    kept = keys(partial)
    assert 3 <= len(kept) < TOTAL and len(set(kept)) == len(kept)

    code, output = run(eval_command(tiny_model_dir, out))
    assert code == 0, output
    assert f"{len(kept)} episodes already played, {TOTAL - len(kept)} to go" in output
    episodes = partial.parent / "episodes.jsonl"
    assert len(keys(episodes)) == TOTAL and set(kept) <= set(keys(episodes))
    assert len(set(keys(episodes))) == TOTAL and not partial.exists()
    summary = json.loads((partial.parent / "summary.json").read_text())
    assert summary["episodes"] == TOTAL


@pytest.mark.slow  # over 9 s on 2 cores: the full suite only
def test_an_eval_into_a_folder_of_another_evaluation_is_refused_unless_replaced(
    tiny_model_dir, tmp_path
):
    out = tmp_path / "eval"
    args = ["--tasks", "0-1", "-n", "1", "--max-turns", "1", "--max-new-tokens", "4"]
    base = [sys.executable, "-m", "agenttrain", "eval", "--split", "test"]
    base += ["--model", str(tiny_model_dir)]
    code, output = run([*base, *args, "--out", str(out)])
    assert code == 0, output
    code, output = run([*base, *args[:-1], "8", "--out", str(out)])
    assert code == 2, output
    assert "holds an evaluation of this model with other settings" in output
    assert "rollout.max_new_tokens 4 -> 8" in output and "--replace" in output
    code, output = run([*base, *args[:-1], "8", "--out", str(out), "--replace"])
    assert code == 0, output
    settings = json.loads((out / slug(str(tiny_model_dir)) / "settings.json").read_text())
    assert settings["rollout"]["max_new_tokens"] == 8


@pytest.mark.slow  # over 9 s on 2 cores: the full suite only
def test_more_samples_or_tasks_into_the_same_folder_keep_the_episodes_played(
    tiny_model_dir, tmp_path
):
    out = tmp_path / "eval"
    base = [sys.executable, "-m", "agenttrain", "eval", "--split", "test", "--max-turns", "1"]
    base += ["--max-new-tokens", "4", "--model", str(tiny_model_dir), "--out", str(out)]
    episodes = out / slug(str(tiny_model_dir)) / "episodes.jsonl"
    code, output = run([*base, "--tasks", "0-1", "-n", "1"])
    assert code == 0, output
    first = episodes.read_text().splitlines()

    code, output = run([*base, "--tasks", "0-2", "-n", "2"])
    assert code == 0, output
    assert "2 episodes already played, 4 to go" in output
    lines = episodes.read_text().splitlines()
    played = keys(episodes)
    assert len(set(played)) == 6 and {s for _, _, s in played} == {0, 1}
    assert len({t for t, _, _ in played}) == 3
    assert set(first) <= set(lines)  # the first run's episodes, kept as they were

    code, output = run([*base, "--tasks", "0-2", "-n", "1"])  # fewer: would drop episodes
    assert code == 2, output
    assert "n 2 -> 1" in output
