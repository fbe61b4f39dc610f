"""The comparison table and plot: both success rates, task counts, and summaries of any age."""

from __future__ import annotations

from agenttrain.eval.metrics import summarize
from agenttrain.eval.report import metrics_table, played_turns, plot_comparison
from eval.test_metrics import episode


def test_the_comparison_shows_both_rates_the_error_count_and_partial_task_counts(tmp_path):
    healthy = summarize([episode(0, True), episode(0, False), episode(1, True), episode(1, True)])
    broken = summarize(
        [episode(0, True), episode(0, True, finish="env_error"), episode(1, True), episode(1, True)]
    )
    older = {"episodes": 4, "tasks": 2, "success_rate": 0.5, "pass@1": 0.5}  # before env_errors
    summaries = {"healthy": healthy, "broken": broken, "older": older}

    rows = {line.split(" | ")[0].strip("| "): line for line in metrics_table(summaries).split("\n")}
    assert "| env errors | agent errors | success (scored) | success (all) |" in rows["model"]
    assert "| 4 | 0 | 0 | 0.750 [0.50, 1.00] | 0.750 |" in rows["healthy"]  # tasks at 0.5, 1
    assert "| 4 | 1 | 0 | 1.000 [1.00, 1.00] | 0.750 |" in rows["broken"]
    assert "1.000 (1/2 tasks)" in rows["broken"]  # pass@2 and avg@2 over task 1 only
    assert "| 4 | - | - | 0.500 | - |" in rows["older"]

    plot_comparison(summaries, tmp_path / "comparison.png")
    assert (tmp_path / "comparison.png").stat().st_size > 1000


def test_env_error_episodes_are_neither_a_depth_bucket_nor_zero_turn_episodes():
    failed = episode(3, False, finish="env_error", turns=0)
    failed.task_info = {}  # the environment failed before the first observation
    trajectories = [episode(1, True, depth=2), episode(2, False, depth=2), failed]
    summary = summarize(trajectories, group_by="depth")
    assert set(summary["by_depth"]) == {"2"}
    assert summary["episodes"] == 3 and summary["env_errors"] == 1
    assert played_turns(trajectories) == [2, 2]
