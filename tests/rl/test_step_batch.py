"""What a step's batch reports about where its signal came from."""

from __future__ import annotations

from agenttrain.rl.report import step_table
from agenttrain.rl.step_batch import StepBatch
from agenttrain.rl.step_metrics import stratum_metrics
from agenttrain.rollout.trajectory import Trajectory


def episode(group: str, success: bool, finish: str = "done", task: int = 0) -> Trajectory:
    return Trajectory(
        episode_id=f"{group}-{success}",
        env="textcraft",
        task_id=task,
        group_id=group,
        sample=0,
        seed=0,
        model="m",
        success=success,
        finish_reason=finish,
    )


def test_the_success_mixed_share_counts_groups_with_a_success_and_a_failure():
    """Groups whose rewards differ only by a shaping penalty are not counted; an errored
    episode's missing outcome is not a failure; every played group is in the denominator."""
    batch = StepBatch()
    batch.trajectories = [
        episode("a", True),
        episode("a", False),  # mixed
        episode("b", False),
        episode("b", False),  # all failed (a format penalty may still split them)
        episode("c", True),
        episode("c", False, finish="env_error"),  # one scored outcome only
        episode("d", True),
        episode("d", True),
    ]
    assert batch.success_mixed_share() == 1 / 4
    assert StepBatch().success_mixed_share() == 0.0


DEPTH = {1: "depth 1", 2: "depth 2", 3: "depth 2", 9: None}


def test_groups_are_counted_by_difficulty_class_played_informative_and_solved():
    """Which classes the signal came from: a class with groups but no success shows 0 solved;
    an errored episode's success does not count; a task of no known class is left out."""
    trajectories = [
        episode("a", True, task=1),
        episode("a", False, task=1),
        episode("b", False, task=2),
        episode("b", False, task=2),
        episode("c", True, finish="env_error", task=3),
        episode("c", False, task=3),
        episode("d", True, task=9),
    ]
    metrics = stratum_metrics(trajectories, {"a", "b"}, lambda key: DEPTH[key[1]])
    assert metrics == {
        "rollout/stratum/depth_1/groups": 1,
        "rollout/stratum/depth_1/informative_groups": 1,
        "rollout/stratum/depth_1/solved_groups": 1,
        "rollout/stratum/depth_2/groups": 2,
        "rollout/stratum/depth_2/informative_groups": 1,  # a format penalty split group b
        "rollout/stratum/depth_2/solved_groups": 0,
    }


def test_the_step_table_has_a_row_per_step_and_the_classes_after_the_metrics():
    rows = [
        {"step": 0, "val/success_rate": 0.1},  # validation only: no row
        {
            "step": 1,
            "rollout/episodes": 16,
            "rollout/informative_group_share": 0.5,
            "rollout/stratum/depth_10/groups": 1,
            "rollout/stratum/depth_2/groups": 3,
            "rollout/stratum/depth_2/informative_groups": 1,
            "rollout/stratum/depth_2/solved_groups": 2,
        },
        {"step": 2, "rollout/episodes": 16, "rollout/informative_group_share": 0.25},
    ]
    for row in rows[1:]:
        row["env/cut_off_rate"] = 0.0  # no reply cut off: no column
    header, rule, first, second = step_table(rows)
    titles = [cell.strip() for cell in header.strip("|").split("|")]
    assert titles == [
        "step",
        "informative share",
        "depth 2: informative / solved / groups",
        "depth 10: informative / solved / groups",
    ]
    assert rule.count("---") == 4
    assert first == "| 1 | 0.50 | 1 / 2 / 3 | 0 / 0 / 1 |"
    assert second == "| 2 | 0.25 | – | – |"
    rows[2]["env/cut_off_rate"] = 0.125  # a step's replies hit the token limit
    header, _, first, second = step_table(rows)
    assert "| replies cut off |" in header
    assert first.startswith("| 1 | 0.50 | 0.00 |") and second.startswith("| 2 | 0.25 | 0.12 |")
