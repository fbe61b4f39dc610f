"""`agenttrain demos`: successful episodes of a solver on training tasks, as SFT data.

The solver plays through the same engine as `eval` (the oracle, an API model or a
checkpoint); only successful episodes are kept (rejection sampling), in the trajectory
JSONL that `agenttrain sft` reads. The test split is refused.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from agenttrain.eval.runner import EvalConfig, evaluate, select_tasks
from agenttrain.rollout.trajectory import read_jsonl, write_jsonl
from agenttrain.sft.guard import HeldOutGuard


@dataclass
class DemoResult:
    out: Path
    episodes: int
    kept: int
    turns: int


def write_demos(config: EvalConfig, out: Path, console: Console | None = None) -> DemoResult:
    """Play `config` (its `out` is ignored) and write the successful episodes to `out`."""
    guard = HeldOutGuard(config.env)
    guard.refuse_split(config.split, "demonstrations")
    guard.refuse_tasks(select_tasks(config.env, config.split, config.tasks), "demonstrations")
    if len(config.models) != 1:
        raise ValueError("demonstrations come from one solver at a time")
    with tempfile.TemporaryDirectory(prefix="agenttrain-demos-") as scratch:
        played = config.model_copy(update={"out": Path(scratch)})
        result = evaluate(played, console)[0]
        episodes = list(read_jsonl(result.episodes_path))
    kept = [episode for episode in episodes if episode.success]
    write_jsonl(out, kept)
    return DemoResult(out, len(episodes), len(kept), sum(e.num_turns for e in kept))
