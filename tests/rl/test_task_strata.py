"""`env.task_strata`: a run trains on the tasks of the difficulty classes it names (every one of
them, each once an epoch, no other), bad names are clear errors, and verl users are told."""

from __future__ import annotations

from collections import Counter

import pytest

from agenttrain.config import ConfigError
from agenttrain.envs import get_spec
from agenttrain.rl.config import EnvConfig
from agenttrain.rl.environments import RunEnvironments


def environments(*configs: EnvConfig) -> RunEnvironments:
    return RunEnvironments.build(
        list(configs), seed=0, val_tasks=4, validate=True, default_turns=None, timeout_s=10
    )


def depth(task: int) -> str:
    classify = get_spec("textcraft").task_stratum
    assert classify is not None
    return classify(task)


def test_the_stream_plays_every_task_of_the_named_class_once_an_epoch_and_no_other():
    runs = environments(EnvConfig(name="textcraft", task_strata=["depth 1"]))
    train = get_spec("textcraft").split("train")
    depth_one = {task for task in train if depth(task) == "depth 1"}
    assert 0 < len(depth_one) < len(train)
    epoch = len(depth_one)
    plays = Counter(runs.slot(index).task for index in range(2 * epoch))
    assert set(plays) == depth_one and set(plays.values()) == {2}


def test_several_classes_are_a_union_and_validation_keeps_the_whole_split():
    runs = environments(EnvConfig(name="textcraft", task_strata=["depth 1", "depth 3"]))
    part = runs["textcraft"]
    assert {depth(task) for task in part.train_tasks} == {"depth 1", "depth 3"}
    everything = environments(EnvConfig(name="textcraft"))["textcraft"]
    assert part.val_tasks == everything.val_tasks
    assert part.train_tasks == [
        t for t in everything.train_tasks if depth(t) in {"depth 1", "depth 3"}
    ]


def test_frontier_candidates_come_from_the_named_classes_only():
    runs = environments(EnvConfig(name="textcraft", task_strata=["depth 2"]))
    assert {depth(slot.task) for slot in runs.candidates(3, 8)} == {"depth 2"}


@pytest.mark.parametrize(
    ("config", "fragments"),
    [
        (EnvConfig(name="textcraft", task_strata=["depth 9"]), ["depth 9", "depth 1, depth 2"]),
        (EnvConfig(name="textcraft", task_strata=["Depth 1"]), ["Depth 1", "its classes"]),
        (EnvConfig(name="largest", task_strata=["depth 1"]), ["largest has no difficulty"]),
    ],
)
def test_a_class_the_split_lacks_is_named_with_those_it_has(config, fragments):
    with pytest.raises(ConfigError) as error:
        environments(config)
    assert all(fragment in str(error.value) for fragment in fragments)
