"""pass@k, avg@k and summaries against hand-computed values."""

from __future__ import annotations

import pytest

from agenttrain.eval.metrics import (
    bootstrap_interval,
    default_ks,
    differences_to_first,
    paired_difference,
    pass_at_k,
    summarize,
    task_parts,
)
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


def _tasks(successes_per_task: list[int], samples: int = 4) -> list[Trajectory]:
    """One task per entry, with that many of its `samples` episodes solved."""
    return [
        episode(task, sample < solved)
        for task, solved in enumerate(successes_per_task)
        for sample in range(samples)
    ]


def test_every_task_solved_gives_the_interval_one_to_one():
    summary = summarize(_tasks([4] * 30))
    assert summary["success_rate_ci"] == (1.0, 1.0)
    assert summary["mean_reward_ci"] == (1.0, 1.0)


def test_the_interval_holds_the_estimate_and_narrows_with_more_tasks():
    mix = [0, 1, 2, 3, 4]  # success rate 0.5
    few = bootstrap_interval(task_parts(_tasks(mix * 4), "success_rate"))
    many = bootstrap_interval(task_parts(_tasks(mix * 40), "success_rate"))
    for low, high in (few, many):
        assert low < 0.5 < high
    assert many[1] - many[0] < (few[1] - few[0]) / 2  # 10x the tasks: about 1/sqrt(10) as wide


def test_the_same_seed_gives_the_same_interval_and_another_seed_may_not():
    parts = task_parts(_tasks([0, 1, 2, 3, 4, 2, 1] * 3), "success_rate")
    assert bootstrap_interval(parts, seed=7) == bootstrap_interval(parts, seed=7)
    assert bootstrap_interval(parts, seed=7) != bootstrap_interval(parts, seed=8)


def test_samples_of_one_task_are_resampled_together():
    # 2 tasks, one always solved and one never: resampling tasks can draw the same task
    # twice, so the interval spans 0 to 1; resampling the 80 episodes would give about
    # [0.39, 0.61].
    low, high = bootstrap_interval(task_parts(_tasks([40, 0], samples=40), "success_rate"))
    assert low == 0.0 and high == 1.0


def test_env_error_episodes_take_no_part_in_an_interval():
    trajectories = [*_tasks([4, 4]), episode(2, False, finish="env_error")]
    assert set(task_parts(trajectories, "success_rate")) == {("textcraft", 0), ("textcraft", 1)}
    assert summarize(trajectories)["success_rate_ci"] == (1.0, 1.0)


def test_a_paired_difference_excludes_zero_when_one_model_solves_more_tasks():
    weaker = _tasks([2] * 40)
    stronger = _tasks([3] * 40)
    difference = paired_difference(
        task_parts(weaker, "success_rate"), task_parts(stronger, "success_rate")
    )
    assert difference.estimate == pytest.approx(0.25) and difference.tasks == 40
    assert difference.low > 0 and difference.excludes_zero


def test_identical_models_differ_by_zero_with_an_interval_that_holds_zero():
    same = task_parts(_tasks([0, 1, 2, 3, 4] * 8), "success_rate")
    difference = paired_difference(same, same)
    assert difference.estimate == 0.0 and difference.low <= 0.0 <= difference.high
    assert not difference.excludes_zero


def test_a_paired_difference_is_over_shared_tasks_only_and_none_without_any():
    first = task_parts(_tasks([4, 4, 0]), "success_rate")  # tasks 0-2
    other = {key: (0.0, 4.0) for key in [("textcraft", 2), ("textcraft", 3)]}
    difference = paired_difference(first, other)
    assert difference.tasks == 1 and difference.estimate == 0.0  # task 2: 0 of 4 in both
    assert paired_difference(first, {("textcraft", 9): (1.0, 1.0)}) is None


def test_differences_to_first_name_the_baseline_and_every_later_model():
    episodes = {"a": _tasks([2] * 10), "b": _tasks([4] * 10), "c": _tasks([2] * 10)}
    differences = differences_to_first(episodes)
    assert set(differences) == {"b", "c"}
    assert differences["b"]["baseline"] == "a"
    assert differences["b"]["success_rate"]["estimate"] == pytest.approx(0.5)
    assert differences["b"]["success_rate"]["excludes_zero"] is True
    assert differences["c"]["mean_reward"]["excludes_zero"] is False


def test_no_scored_episode_is_no_result_not_a_success_rate_of_zero():
    failed = [episode(0, False, finish="env_error"), episode(1, False, finish="agent_error")]
    summary = summarize(failed)
    assert summary["scored_episodes"] == 0
    assert summary["success_rate"] is None and summary["mean_reward"] is None
    assert summary["success_rate_all"] == 0.0  # over every episode: both failed
    assert summary["env_errors"] == 1 and summary["agent_errors"] == 1
    assert summarize([])["success_rate_all"] is None
