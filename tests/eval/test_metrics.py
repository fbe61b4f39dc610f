"""pass@k, avg@k and summaries against hand-computed values."""

from __future__ import annotations

import pytest

from agenttrain.eval.metrics import default_ks, pass_at_k, summarize
from agenttrain.rollout.trajectory import Trajectory, Turn


def episode(task, success, finish="done", turns=2, format_errors=0, depth=1, reward=None):
    t = Trajectory(
        episode_id=f"{task}-{success}",
        env="textcraft",
        task_id=task,
        group_id=str(task),
        sample=0,
        seed=0,
        model="m",
        task_info={"depth": depth},
    )
    t.turns = [
        Turn("r", None if i < format_errors else "a", "o", 0.0, False, i < format_errors)
        for i in range(turns)
    ]
    t.finish_reason = finish
    t.success = success
    t.reward = (1.0 if success else 0.0) if reward is None else reward
    if finish == "env_error":
        t.reward = None
    return t


def test_pass_at_k_matches_hand_computation():
    assert pass_at_k(4, 0, 1) == 0.0
    assert pass_at_k(4, 4, 1) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)  # 1 - C(3,2)/C(4,2)
    assert pass_at_k(5, 2, 3) == pytest.approx(1 - 1 / 10)  # 1 - C(3,3)/C(5,3)
    assert pass_at_k(3, 2, 2) == 1.0  # fewer failures than k: always a success among k
    with pytest.raises(ValueError, match="at least 5 samples"):
        pass_at_k(4, 1, 5)


def test_summary_reports_both_success_rates_and_counts_env_errors():
    episodes = [
        episode(0, True),
        episode(0, False),  # task 0: 1 of 2
        episode(1, False),
        episode(1, False, finish="env_error"),  # task 1: 0 of 1 scored
        episode(2, True, depth=2),
        episode(2, True, depth=2),  # task 2: 2 of 2
    ]
    summary = summarize(episodes, group_by="depth")
    assert summary["success_rate"] == pytest.approx(3 / 5)  # over scored episodes
    assert summary["success_rate_all"] == pytest.approx(3 / 6)  # the env error as a failure
    assert summary["env_errors"] == 1 and summary["scored_episodes"] == 5
    assert summary["env_error_rate"] == pytest.approx(1 / 6)
    assert summary["tasks"] == 3 and summary["samples_per_task"] == 2
    assert summary["finish_reasons"]["env_error"] == 1
    assert summary["by_depth"]["2"]["success_rate"] == 1.0
    assert summary["by_depth"]["1"]["episodes"] == 4
    assert summary["by_depth"]["1"]["env_errors"] == 1


def test_pass_at_k_keeps_every_k_over_the_tasks_with_enough_scored_samples():
    episodes = [
        episode(0, True),
        episode(0, False),  # task 0: 1 of 2
        episode(1, False),
        episode(1, False, finish="env_error"),  # task 1: 0 of 1 scored
        episode(2, True),
        episode(2, True),  # task 2: 2 of 2
    ]
    summary = summarize(episodes)
    assert summary["pass@1"] == pytest.approx((0.5 + 0.0 + 1.0) / 3)
    assert summary["pass@2"] == pytest.approx((1.0 + 1.0) / 2)  # tasks 0 and 2
    assert summary["avg@2"] == pytest.approx((0.5 + 1.0) / 2)
    assert summary["tasks_per_metric"] == {"pass@1": 3, "pass@2": 2, "avg@2": 2}


def test_a_k_no_task_supports_is_none_with_zero_tasks():
    episodes = [episode(0, True), episode(0, False, finish="env_error")]
    summary = summarize(episodes, ks=[1, 2])
    assert summary["pass@1"] == 1.0 and summary["pass@2"] is None
    assert summary["tasks_per_metric"] == {"pass@1": 1, "pass@2": 0, "avg@2": 0}


def test_every_episode_an_env_error_scores_nothing_and_says_so():
    summary = summarize([episode(0, False, finish="env_error")] * 2)
    assert summary["env_errors"] == 2 and summary["env_error_rate"] == 1.0
    assert summary["success_rate_all"] == 0.0 and summary["pass@1"] is None


def test_default_ks_are_powers_of_two_and_the_sample_count():
    assert default_ks(1) == [1]
    assert default_ks(3) == [1, 2, 3]
    assert default_ks(8) == [1, 2, 4, 8]


def test_format_error_rate_counts_turns():
    summary = summarize([episode(0, False, turns=4, format_errors=3, finish="format_error")])
    assert summary["format_error_rate"] == pytest.approx(3 / 4)
    assert summary["finish_reasons"]["format_error"] == 1
