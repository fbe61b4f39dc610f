"""What a TextCraft policy does after the game refuses a craft, from evaluation episodes.

    .venv/bin/python examples/analysis/textcraft_refusals.py runs/eval/<model>/episodes.jsonl

Per file: refusals ("Could not find enough items to craft ...") followed by another turn, the
share of those where the next action repeats the refused craft, is a `get` of an ingredient the
craft lacked, a `get` of anything else (an ingredient already held in the amount the craft
asks, or no ingredient of it), or is something else; and how many episodes with a refusal were
still solved (docs/results.md); and how many refused crafts, and refused `get`s of an item
that must be crafted, were followed by a move (an `inventory` check aside) toward what they
lacked, as `reward.recovery_penalty` counts them.
What was held is found by replaying each episode's actions in the game.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from agenttrain.envs.textcraft.game import TextCraftGame
from agenttrain.envs.textcraft.recipes import default_book, item_id
from agenttrain.envs.textcraft.recoveries import REFUSED_CRAFT, REFUSED_GET, refusal_outcomes
from agenttrain.envs.textcraft.recovery import GET, REFUSAL
from agenttrain.envs.textcraft.tasks import task


def after_refusals(episode: dict[str, Any]) -> Counter[str]:
    """What each refusal followed by a turn was followed by, replaying `episode`'s actions."""
    game = TextCraftGame(default_book(), task(episode["task_id"]).goal)
    kinds: Counter[str] = Counter()
    turns = episode["turns"]
    for turn, after in zip(turns, [*turns[1:], None], strict=True):
        action = turn["action"]
        lacking = game.lacking(action) if action is not None else []
        if action is not None:
            game.step(action)
        if after is None or not turn["observation"].startswith(REFUSAL):
            continue
        fetched = GET.fullmatch(after["action"] or "")
        if after["action"] == action:
            kinds["same craft"] += 1
        elif fetched:
            kinds["get lacking" if item_id(fetched[1]) in lacking else "get other"] += 1
        else:
            kinds["other"] += 1
    return kinds


def summary(path: Path) -> str:
    kinds: Counter[str] = Counter()
    with_refusal = solved = 0
    counted: Counter[str] = Counter()
    recovered: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        episode = json.loads(line)
        actions = [turn["action"] for turn in episode["turns"] if turn["action"] is not None]
        for kind, answered in refusal_outcomes(episode["task_id"], actions):
            counted[kind] += 1
            recovered[kind] += answered
        if not any(turn["observation"].startswith(REFUSAL) for turn in episode["turns"]):
            continue
        with_refusal += 1
        solved += bool(episode["success"])
        kinds += after_refusals(episode)
    refused = kinds.total()
    if not refused:
        return f"{path}: no refusal followed by a turn; {with_refusal} episodes with a refusal"
    shares = ", ".join(
        f"{kind} {kinds[kind] / refused:.0%}"
        for kind in ("same craft", "get lacking", "get other", "other")
    )
    return (
        f"{path}: {refused} refusals followed by a turn: {shares}; "
        f"episodes with a refusal solved {solved} of {with_refusal}; "
        "next move went after what was lacking: "
        f"after a refused craft {recovered[REFUSED_CRAFT]} of {counted[REFUSED_CRAFT]}, "
        f"after a get of an item to craft {recovered[REFUSED_GET]} of {counted[REFUSED_GET]}"
    )


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print(summary(Path(name)))
