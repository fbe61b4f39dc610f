"""What a TextCraft policy does after the game refuses a craft, from evaluation episodes.

    .venv/bin/python examples/analysis/textcraft_refusals.py runs/eval/<model>/episodes.jsonl

Per file: refusals ("Could not find enough items to craft ...") followed by another turn, the
share of those where the next action repeats the refused craft, is a `get` of an ingredient the
craft lacked, a `get` of anything else (an ingredient already held in the amount the craft
asks, or no ingredient of it), or is something else; and how many episodes with a refusal were
still solved (docs/results.md). What was held is found by replaying each episode's actions in
the game.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from agenttrain.envs.textcraft.env import TextCraftEnv
from agenttrain.envs.textcraft.recovery import GET, REFUSAL

COUNTED = re.compile(r"([0-9]+) (.+)")


def lacking(craft: str, inventory: dict[str, int]) -> set[str]:
    """Ingredients of a `craft ... using n a, m b` action that `inventory` holds too few of."""
    _, _, given = craft.partition(" using ")
    parts = [COUNTED.match(part.strip()) for part in given.split(",")]
    return {p[2] for p in parts if p and inventory.get(p[2], 0) < int(p[1])}


def after_refusals(episode: dict[str, Any]) -> Counter[str]:
    """What each refusal followed by a turn was followed by, replaying `episode`'s actions."""
    env = TextCraftEnv()
    env.reset_sync(episode["task_id"])
    held: dict[str, int] = {}
    kinds: Counter[str] = Counter()
    turns = episode["turns"]
    for turn, after in zip(turns, [*turns[1:], None], strict=True):
        action, before = turn["action"], held
        if action is not None:
            held = env.step_sync(action).info["inventory"]
        if after is None or not turn["observation"].startswith(REFUSAL):
            continue
        fetched = GET.fullmatch(after["action"] or "")
        if after["action"] == action:
            kinds["same craft"] += 1
        elif fetched:
            kinds["get lacking" if fetched[1] in lacking(action, before) else "get other"] += 1
        else:
            kinds["other"] += 1
    return kinds


def summary(path: Path) -> str:
    kinds: Counter[str] = Counter()
    with_refusal = solved = 0
    for line in path.read_text().splitlines():
        episode = json.loads(line)
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
        f"episodes with a refusal solved {solved} of {with_refusal}"
    )


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print(summary(Path(name)))
