"""`agenttrain demos`: successful episodes of a solver on training tasks, as SFT data.

The solver plays through the same engine as `eval` (the oracle, an API model or a
checkpoint); only successful episodes are kept (rejection sampling), in the trajectory
JSONL that `agenttrain sft` reads. The test split is refused.
"""

from __future__ import annotations

import json
import random
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from agenttrain.eval.runner import EvalConfig, evaluate, select_tasks
from agenttrain.rollout.trajectory import read_jsonl, write_jsonl
from agenttrain.sft.guard import HeldOutGuard

if TYPE_CHECKING:
    from agenttrain.envs.textcraft.recovery import RecoveryFrom, RecoveryStyle


@dataclass
class DemoResult:
    out: Path
    episodes: int
    kept: int
    turns: int
    not_kept: dict[str, int] = field(default_factory=dict)
    """Episodes left out, by finish reason (unsolved ones: `max_turns`, `done` with no
    success, ...; failed ones: `agent_error`, `env_error`)."""
    errors: list[str] = field(default_factory=list)
    """'task N: message' of each episode that failed (a solver over its budget, a server)."""

    def not_kept_line(self) -> str:
        """What was left out and why, in one line ('' when every episode was kept)."""
        if not self.not_kept:
            return ""
        reasons = ", ".join(f"{count} {reason}" for reason, count in self.not_kept.items())
        shown = "; ".join(self.errors[:5]) + (" …" if len(self.errors) > 5 else "")
        return f"not kept: {reasons}" + (f" ({shown})" if shown else "")


def check_writable(out: Path) -> None:
    """Refuse an output path that cannot be written, naming why (a folder, a read-only or
    missing place), before any episode is played."""
    if out.is_dir():
        raise ValueError(f"--out {out} is a folder; give a .jsonl file")
    blocking = next((p for p in out.parents if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise ValueError(f"cannot write {out}: {blocking} is a file, not a folder")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out.parent, prefix=".agenttrain-write-test-"):
            pass
    except OSError as problem:
        raise ValueError(f"cannot write {out}: {problem.strerror or problem}") from None


def write_demos(config: EvalConfig, out: Path, console: Console | None = None) -> DemoResult:
    """Play `config` (its `out` is ignored) and write the successful episodes to `out`."""
    guard = HeldOutGuard(config.env)
    guard.refuse_split(config.split, "demonstrations")
    guard.refuse_tasks(select_tasks(config.env, config.split, config.tasks), "demonstrations")
    if len(config.models) != 1:
        raise ValueError("demonstrations come from one solver at a time")
    check_writable(out)  # before an hour of play, not after
    with tempfile.TemporaryDirectory(prefix="agenttrain-demos-") as scratch:
        played = config.model_copy(update={"out": Path(scratch)})
        result = evaluate(played, console)[0]
        episodes = list(read_jsonl(result.episodes_path))
    kept = [episode for episode in episodes if episode.success]
    write_jsonl(out, kept)
    left = [e for e in episodes if not e.success]
    return DemoResult(
        out,
        len(episodes),
        len(kept),
        sum(e.num_turns for e in kept),
        dict(Counter(str(e.finish_reason) for e in left).most_common()),
        [f"task {e.task_id}: {e.error}" for e in left if e.errored],
    )


def check_recovery(
    env: str, style: str = "plain", action_format: str = "react", recovery_from: str = "craft"
) -> None:
    """Refuse `--recovery` where it cannot be written, before play: an environment without
    recovery demonstrations, or an inventory check or refused `get` (replies written here, in
    react) in another format."""
    if env != "textcraft":
        raise ValueError(f"--recovery exists for textcraft only, not {env!r}")
    if style == "inventory" and action_format != "react":
        raise ValueError(
            f"--recovery-style inventory writes react replies; --format is {action_format!r}"
        )
    if recovery_from != "craft" and action_format != "react":
        raise ValueError(
            f"--recovery-from {recovery_from} writes react replies; --format is {action_format!r}"
        )


def add_recovery(
    out: Path,
    env: str,
    share: float,
    seed: int,
    style: RecoveryStyle = "plain",
    recovery_from: RecoveryFrom = "craft",
) -> int:
    """Rewrite a `share` of the demonstrations in `out` with one refused action (of the kinds
    `recovery_from` names) and its recovery (`envs/textcraft/recovery.py`, in `style`), chosen
    with `seed`; returns how many."""
    if not share:
        return 0
    check_recovery(env, style, recovery_from=recovery_from)
    from agenttrain.envs.textcraft.recovery import SLIPS, with_recovery

    rng = random.Random(f"{seed}/recovery")
    slips = SLIPS[recovery_from]
    records = _read_records(out)
    rewritten = 0
    for index, record in enumerate(records):
        if rng.random() < share and (changed := with_recovery(record, rng, style, slips)):
            records[index] = changed
            rewritten += 1
    _replace_records(out, records)
    return rewritten


def _read_records(out: Path) -> list[dict]:
    return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]


def _replace_records(out: Path, records: list[dict]) -> None:
    """Write `records` over `out` in one step (a staging file renamed), so a crash mid-write
    leaves the previous demonstrations whole."""
    staging = out.with_name(f".{out.name}.rewrite")
    staging.write_text("".join(json.dumps(record) + "\n" for record in records))
    staging.replace(out)


def check_quotes(env: str, action_format: str = "react", flag: str = "--quote-recipes") -> None:
    """Refuse `flag` (a rewrite of thoughts: `--quote-recipes`, `--still-needed`) where it
    cannot be written, before play: it writes in the thoughts of TextCraft's react replies."""
    if env != "textcraft":
        raise ValueError(f"{flag} exists for textcraft only, not {env!r}")
    if action_format != "react":
        raise ValueError(f"{flag} writes react thoughts; --format is {action_format!r}")


def check_ingredients(quote_recipes: bool) -> None:
    """Refuse `--quote-ingredients` alone: it says something after each quote."""
    if not quote_recipes:
        raise ValueError("--quote-ingredients follows each quote of --quote-recipes; give both")


def add_quotes(out: Path, env: str, action_format: str = "react", ingredients: bool = False) -> int:
    """Rewrite every demonstration in `out` so that its thoughts quote the recipe they follow
    the first time they work toward an item, with `ingredients` also which of its ingredients
    are crafted (`envs/textcraft/quotes.py`); returns how many."""
    check_quotes(env, action_format)
    from agenttrain.envs.textcraft.quotes import with_quoted_recipes

    records = [with_quoted_recipes(record, ingredients) for record in _read_records(out)]
    _replace_records(out, records)
    return len(records)


def add_needs(out: Path, env: str, action_format: str = "react") -> int:
    """Rewrite every demonstration in `out` so that its `get` and craft thoughts end with what
    the item they work toward still needs (`envs/textcraft/needs.py`); returns how many."""
    check_quotes(env, action_format, "--still-needed")
    from agenttrain.envs.textcraft.needs import with_needs

    records = [with_needs(record) for record in _read_records(out)]
    _replace_records(out, records)
    return len(records)


def other_rewrites(
    recovery_from: str, recovery_style: str, quote_recipes: bool, still_needed: bool
) -> tuple[str, ...]:
    """The rewrites given that `--todo` cannot go with, as a user typed them (`--recovery`
    goes with it: its refused craft is written in to-do replies)."""
    given = {
        f"--recovery-from {recovery_from}": recovery_from != "craft",
        f"--recovery-style {recovery_style}": recovery_style != "plain",
        "--quote-recipes": quote_recipes,
        "--still-needed": still_needed,
    }
    return tuple(flag for flag, value in given.items() if value)


def check_todo(env: str, action_format: str = "react", combined: tuple[str, ...] = ()) -> None:
    """Refuse `--todo` where it cannot be written, before play: it writes whole TextCraft
    react replies, so no other rewrite of the replies (`combined`, the flags given) may go
    with it but its own refused craft (`--recovery`)."""
    check_quotes(env, action_format, "--todo")
    if combined:
        raise ValueError(
            f"--todo writes every reply itself; it does not combine with {', '.join(combined)}"
        )


def add_todo(
    out: Path, env: str, action_format: str = "react", recovery: float = 0.0, seed: int = 0
) -> tuple[int, int]:
    """Rewrite every demonstration in `out` to fetch each ingredient with `get` before it is
    known to be crafted and to carry a to-do list (`envs/textcraft/todo.py`), a `recovery`
    share of them with a craft sent too early and its recovery (chosen with `seed`); returns
    how many were rewritten and how many of those recover (a demonstration whose replay does
    not go as planned stays as it was)."""
    check_todo(env, action_format)
    from agenttrain.envs.textcraft.todo import craft_slips, todo_plan, with_todo

    rng = random.Random(f"{seed}/recovery")
    records = _read_records(out)
    rewritten, recovering = 0, 0
    for index, record in enumerate(records):
        slips = craft_slips(todo_plan(record).events) if rng.random() < recovery else []
        slip = rng.choice(slips) if slips else None
        if (changed := with_todo(record, slip)) is not None:
            records[index] = changed
            rewritten += 1
            recovering += slip is not None
    _replace_records(out, records)
    return rewritten, recovering
