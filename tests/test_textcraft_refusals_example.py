"""examples/analysis/textcraft_refusals.py: what follows a refused action (docs/results.md)."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

from agenttrain.envs.textcraft.env import TextCraftEnv

SCRIPT = Path(__file__).parents[1] / "examples" / "analysis" / "textcraft_refusals.py"
BEACON = 2  # craft 1 beacon using 1 nether star, 5 glass, 3 obsidian
CRAFT = "craft 1 beacon using 1 nether star, 5 glass, 3 obsidian"


def played(*actions):
    """An episode of the beacon task with the game's own answers to `actions`."""
    env = TextCraftEnv()
    env.reset_sync(BEACON)
    turns = [{"action": a, "observation": env.step_sync(a).observation} for a in actions]
    return {
        "task_id": BEACON,
        "turns": turns,
        "success": turns[-1]["observation"].startswith("Crafted"),
    }


def test_refusals_are_split_by_what_the_next_turn_does(tmp_path):
    episodes = [
        # refused with nothing held: the same craft again, then a get of a lacking ingredient
        played(CRAFT, CRAFT, "get 5 glass"),
        # refused holding glass: a get of glass (held enough) is not a lacking one; inventory
        played("get 5 glass", CRAFT, "get 5 glass", CRAFT, "inventory"),
        # refused lacking only the nether star, which is fetched, then solved
        played("get 5 glass", "get 3 obsidian", CRAFT, "get 1 nether star", CRAFT),
        played("get 5 glass"),  # no refusal
        # a get of the beacon, which must be crafted, answered by an ingredient of it
        played("get 1 beacon", "get 5 glass"),
    ]
    path = tmp_path / "episodes.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in episodes))
    summary = runpy.run_path(str(SCRIPT))["summary"]
    assert summary(path) == (
        f"{path}: 5 refusals followed by a turn: same craft 20%, get lacking 40%, "
        "get other 20%, other 20%; episodes with a refusal solved 1 of 3; "
        "next move went after what was lacking: "
        "after a refused craft 2 of 4, "  # a refusal then only `inventory`: not counted
        "after a get of an item to craft 1 of 1"
    )
