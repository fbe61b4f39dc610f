"""What a TextCraft policy does after the game refuses a craft, from evaluation episodes.

    python examples/analysis/textcraft_refusals.py runs/eval-sft/<model>/episodes.jsonl [...]

Per file: refusals ("Could not find enough items to craft ...") followed by another turn, the
share of those where the next action repeats the refused craft, is a `get`, or is something
else; and how many episodes with a refusal were still solved (docs/results.md).
"""

from __future__ import annotations

import json
import sys
from itertools import pairwise
from pathlib import Path

from agenttrain.envs.textcraft.recovery import REFUSAL


def summary(path: Path) -> str:
    refused = repeated = fetched = 0
    with_refusal = solved = 0
    for line in path.read_text().splitlines():
        episode = json.loads(line)
        turns = episode["turns"]
        if not any(turn["observation"].startswith(REFUSAL) for turn in turns):
            continue
        with_refusal += 1
        solved += bool(episode["success"])
        for turn, after in pairwise(turns):
            if not turn["observation"].startswith(REFUSAL):
                continue
            refused += 1
            if after["action"] == turn["action"]:
                repeated += 1
            elif (after["action"] or "").startswith("get "):
                fetched += 1
    if not refused:
        return f"{path}: no refusal followed by a turn; {with_refusal} episodes with a refusal"
    other = refused - repeated - fetched
    return (
        f"{path}: {refused} refusals followed by a turn: same craft {repeated / refused:.0%}, "
        f"get {fetched / refused:.0%}, other {other / refused:.0%}; "
        f"episodes with a refusal solved {solved} of {with_refusal}"
    )


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print(summary(Path(name)))
