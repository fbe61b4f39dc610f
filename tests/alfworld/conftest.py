"""Fixtures: a stand-in `alfworld` package and a small `$ALFWORLD_DATA` folder of its games."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fake_alfworld_game import ANSWERS, COMMANDS, INTRO

from agenttrain.envs.alfworld import register_alfworld
from agenttrain.envs.alfworld.games import game_file

FAKE_PACKAGE_ROOT = Path(__file__).parent / "fake_alfworld"
GAMES = (0, 2420)
"""A train game and the first test game are present; every other is missing."""


@dataclass(frozen=True)
class FakeALFWorld:
    data_dir: Path


def _forget_alfworld_modules() -> None:
    for name in [m for m in sys.modules if m == "alfworld" or m.startswith("alfworld.")]:
        del sys.modules[name]


@pytest.fixture
def fake_alfworld(tmp_path, monkeypatch) -> Iterator[FakeALFWorld]:
    """The stand-in `alfworld` importable here and in worker processes (PYTHONPATH),
    `$ALFWORLD_DATA` holding games 0 and 2420, and ALFWorld registered in-process."""
    data_dir = tmp_path / "alfworld-data"
    for task_id in GAMES:
        path = game_file(data_dir, task_id)
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"intro": INTRO, "commands": COMMANDS, "answers": ANSWERS}))
    _forget_alfworld_modules()
    monkeypatch.syspath_prepend(str(FAKE_PACKAGE_ROOT))
    monkeypatch.setenv("PYTHONPATH", str(FAKE_PACKAGE_ROOT))
    monkeypatch.setenv("ALFWORLD_DATA", str(data_dir))
    register_alfworld(replace_existing=True)
    yield FakeALFWorld(data_dir)
    monkeypatch.undo()
    _forget_alfworld_modules()
    register_alfworld(replace_existing=True)
