"""AgentGym's 40 BabyAI levels, its task mapping and our splits.

Task `data_idx` is level `data_idx % 40 + 1` played with seed `data_idx // 40` (AgentGym's
server, reference §1.2). Each level is built from minigrid's class with the keyword
arguments that minigrid 2.3.1 (AgentGym's pin) registered under AgentGym's gym id, so the
tasks do not depend on gymnasium's registry; among them `BabyAI-GoToObjS6-v0`, which that
release registered with a 4x4 room (newer releases keep the id only as `-v1`, with 6x6).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from minigrid.envs import babyai
from minigrid.envs.babyai.core.roomgrid_level import RoomGridLevel


@dataclass(frozen=True)
class Level:
    number: int
    """AgentGym's level number, 1-40."""
    gym_id: str
    """The gym id AgentGym builds it by."""
    builder: str
    """The minigrid class in `minigrid.envs.babyai`."""
    category: str
    """The AgentGym paper's task category (Table 4) where it has one, else the level family."""
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def build(self) -> RoomGridLevel:
        return getattr(babyai, self.builder)(**self.kwargs)


def _level(number: int, name: str, builder: str, category: str, **kwargs: Any) -> Level:
    return Level(number, f"BabyAI-{name}-v0", builder, category, kwargs)


LEVELS: tuple[Level, ...] = (
    _level(1, "GoToRedBallGrey", "GoToRedBallGrey", "GoTo"),
    _level(2, "GoToRedBall", "GoToRedBall", "GoTo"),
    _level(3, "GoToRedBallNoDists", "GoToRedBallNoDists", "GoTo"),
    _level(4, "GoToObjS6", "GoToObj", "GoTo", room_size=4),
    _level(5, "GoToLocalS8N7", "GoToLocal", "GoTo", room_size=8, num_dists=7),
    _level(6, "GoToObjMazeS7", "GoTo", "GoTo", num_dists=1, room_size=7),
    _level(7, "GoToImpUnlock", "GoToImpUnlock", "GoTo"),
    _level(8, "GoToSeqS5R2", "GoToSeq", "GoTo", room_size=5, num_rows=2, num_cols=2, num_dists=4),
    _level(9, "GoToRedBlueBall", "GoToRedBlueBall", "GoTo"),
    _level(10, "GoToDoor", "GoToDoor", "GoTo"),
    _level(11, "GoToObjDoor", "GoToObjDoor", "GoTo"),
    _level(12, "Open", "Open", "Open"),
    _level(13, "OpenRedDoor", "OpenRedDoor", "Open"),
    _level(14, "OpenDoorLoc", "OpenDoor", "Open", select_by="loc"),
    _level(
        15,
        "OpenRedBlueDoorsDebug",
        "OpenTwoDoors",
        "Open",
        first_color="red",
        second_color="blue",
        strict=True,
    ),
    _level(16, "OpenDoorsOrderN4Debug", "OpenDoorsOrder", "Open", debug=True, num_doors=4),
    _level(17, "Pickup", "Pickup", "Pickup"),
    _level(18, "UnblockPickup", "UnblockPickup", "Pickup"),
    _level(19, "PickupLoc", "PickupLoc", "Pickup"),
    _level(20, "PickupDistDebug", "PickupDist", "Pickup", debug=True),
    _level(21, "PickupAbove", "PickupAbove", "Pickup"),
    _level(22, "PutNextLocalS6N4", "PutNextLocal", "PutNext", room_size=6, num_objs=4),
    _level(
        23,
        "PutNextS7N4Carrying",
        "PutNext",
        "PutNext",
        room_size=7,
        objs_per_room=4,
        start_carrying=True,
    ),
    _level(24, "Unlock", "Unlock", "Unlock"),
    _level(25, "UnlockLocalDist", "UnlockLocal", "Unlock", distractors=True),
    _level(26, "KeyInBox", "KeyInBox", "Unlock"),
    _level(27, "UnlockPickupDist", "UnlockPickup", "Unlock", distractors=True),
    _level(28, "BlockedUnlockPickup", "BlockedUnlockPickup", "Unlock"),
    _level(29, "UnlockToUnlock", "UnlockToUnlock", "Unlock"),
    _level(30, "ActionObjDoor", "ActionObjDoor", "AOD"),
    _level(31, "FindObjS7", "FindObjS5", "Find", room_size=7),
    _level(32, "KeyCorridorS6R3", "KeyCorridor", "KeyCorridor", room_size=6, num_rows=3),
    _level(33, "OneRoomS20", "OneRoomS8", "Room", room_size=20),
    _level(34, "MoveTwoAcrossS8N9", "MoveTwoAcross", "MoveTwoAcross", room_size=8, objs_per_room=9),
    _level(35, "SynthS5R2", "Synth", "Synth", room_size=5, num_rows=2),
    _level(36, "SynthLoc", "SynthLoc", "SLoc"),
    _level(37, "SynthSeq", "SynthSeq", "SynthSeq"),
    _level(38, "MiniBossLevel", "MiniBossLevel", "Boss"),
    _level(39, "BossLevel", "BossLevel", "Boss"),
    _level(40, "BossLevelNoUnlock", "BossLevelNoUnlock", "Boss"),
)

TEST_SEEDS = {"GoTo": 5, "Pickup": 3, "AOD": 5, "Find": 5, "Room": 5, "SLoc": 5}
"""Seeds 0..n-1 of every level in these categories form the test split: 11 GoTo levels x 5,
5 Pickup levels x 3 and 5 each of ActionObjDoor, FindObj, OneRoom and SynthLoc, AgentGym's
90-task mix (paper Table 4: GoTo 55, Pickup 15, AOD 5, Find 5, Room 5, SLoc 5)."""
SPLIT_END = 900
"""Train and test share ids 0..899 (test's 90, train the other 810, AgentGym's counts)."""
VAL = range(900, 980)
"""Validation: the next 80 ids, every level twice."""


@dataclass(frozen=True)
class Task:
    task_id: int
    level: Level
    seed: int


def task(task_id: int) -> Task:
    """AgentGym's mapping of a task id (any int >= 0) to level and seed."""
    if task_id < 0:
        raise ValueError(f"BabyAI task ids are 0 or more, not {task_id}")
    return Task(task_id, LEVELS[task_id % 40], task_id // 40)


@cache
def splits() -> dict[str, tuple[int, ...]]:
    """`train` (810), `val` (80) and `test` (90, AgentGym's category mix), disjoint."""
    test = sorted(
        seed * 40 + level.number - 1
        for level in LEVELS
        for seed in range(TEST_SEEDS.get(level.category, 0))
    )
    held_out = set(test)
    train = [i for i in range(SPLIT_END) if i not in held_out]
    return {"train": tuple(train), "val": tuple(VAL), "test": tuple(test)}
