"""examples/analysis/textcraft_refusals.py: what follows a refused craft (docs/results.md)."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

SCRIPT = Path(__file__).parents[1] / "examples" / "analysis" / "textcraft_refusals.py"
REFUSED = "Could not find enough items to craft minecraft:beacon"


def episode(actions_and_observations, success):
    turns = [{"action": a, "observation": o} for a, o in actions_and_observations]
    return {"turns": turns, "success": success}


def test_refusals_are_split_by_what_the_next_turn_does(tmp_path):
    craft = "craft 1 beacon using 1 nether star, 5 glass, 3 obsidian"
    episodes = [
        episode([(craft, REFUSED), (craft, REFUSED), ("get 5 glass", "Got 5 glass")], False),
        episode([(craft, REFUSED), ("inventory", "Inventory: ..."), (craft, "Crafted")], True),
        episode([("get 5 glass", "Got 5 glass")], True),
    ]
    path = tmp_path / "episodes.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in episodes))
    summary = runpy.run_path(str(SCRIPT))["summary"]
    assert summary(path) == (
        f"{path}: 3 refusals followed by a turn: same craft 33%, get 33%, other 33%; "
        "episodes with a refusal solved 1 of 2"
    )
