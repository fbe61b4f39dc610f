"""`agenttrain eval --workers N`: one model's episodes played by N processes on a CPU."""

from __future__ import annotations

import json
import multiprocessing
import signal
import time

from typer.testing import CliRunner

from agenttrain.cli import app
from agenttrain.eval.workers import shares, wind_down
from agenttrain.rollout.engine import EpisodeRequest

runner = CliRunner()


def _episodes(folder):
    (model,) = [p for p in folder.iterdir() if p.is_dir()]
    return [json.loads(line) for line in (model / "episodes.jsonl").open()]


def test_two_workers_play_every_episode_once_and_the_folder_stays_one_evaluation(
    tiny_model_dir, tmp_path
):
    """Every requested episode is recorded once, in request order, with the summary a single
    process writes; a continuation with one worker finds nothing left to play (workers change
    speed, not what is measured)."""
    out = tmp_path / "eval"
    common = ["eval", "--model", str(tiny_model_dir), "--max-turns", "2", "--max-new-tokens", "4"]
    common += ["--tasks", "0-2", "-n", "3", "--seeds", "0,1", "--out", str(out)]
    result = runner.invoke(app, [*common, "--workers", "2"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    episodes = _episodes(out)
    keys = [(e["seed"], e["task_id"], e["sample"]) for e in episodes]
    assert len(keys) == len(set(keys)) == 2 * 3 * 3
    assert all(e["response_ids"] and e["finish_reason"] for e in episodes)
    (summary,) = json.loads((out / "summary.json").read_text()).values()
    assert summary["episodes"] == 18 and summary["generated_tokens"] > 0
    assert summary["generated_tokens"] == sum(
        sum(turn["new_tokens"] for turn in e["turns"]) for e in episodes
    )
    again = runner.invoke(app, [*common, "--workers", "1"], env={"COLUMNS": "200"})
    assert again.exit_code == 0, again.output
    assert "18 episodes already played, 0 to go" in " ".join(again.output.split())


def test_a_worker_that_cannot_load_the_model_is_a_clear_error_not_a_hang(tmp_path):
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "no-such-architecture"}')
    out = tmp_path / "eval"
    args = ["eval", "--model", str(broken), "--tasks", "0-1", "--workers", "2", "--out", str(out)]
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code != 0
    assert "evaluation worker failed" in str(result.exception), result.output
    assert "load_policy" in str(result.exception)  # the worker's own traceback comes along


def test_workers_on_a_gpu_or_a_server_are_refused_with_the_reason(tmp_path):
    args = ["eval", "--tasks", "0", "--workers", "2", "--device", "cuda", "--out", str(tmp_path)]
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "--device cpu and --backend hf" in " ".join(result.output.split())


def test_shares_deal_requests_round_robin_and_drop_empty_ones():
    requests = [EpisodeRequest(task, group_id=str(task)) for task in range(5)]
    dealt = shares(requests, 2)
    assert [[r.task_id for r in part] for part in dealt] == [[0, 2, 4], [1, 3]]
    assert len(shares(requests[:1], 3)) == 1


def test_workers_that_finished_exit_by_themselves_and_failed_runs_do_not_wait():
    """After the last episode a worker still exits (its exit handlers unlink its semaphores);
    stopping it then left Python's 'leaked semaphore objects' warning at the end of `make
    demo`. After a failure or Ctrl-C nothing is waited for."""
    context = multiprocessing.get_context("spawn")
    exiting = [context.Process(target=time.sleep, args=(0.5,)) for _ in range(2)]
    for process in exiting:
        process.start()
    wind_down(exiting, grace_s=30.0)
    assert [p.exitcode for p in exiting] == [0, 0]
    stuck = context.Process(target=time.sleep, args=(60,))
    stuck.start()
    started = time.monotonic()
    wind_down([stuck], grace_s=0.0)
    assert stuck.exitcode == -signal.SIGTERM and time.monotonic() - started < 30
