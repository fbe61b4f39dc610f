"""How episodes failed, in `agenttrain compare`: what went wrong first in each failed episode.

A success rate says how often a model fails, not why; a lever is chosen by the why (a model
that invents recipes needs other help than one that forgets an ingredient). Each scored
episode that failed is filed under the first turn that went wrong: a reply the action format
refused ("format error"; one cut off by the token limit is filed apart, since its lever is
the limit, not the format), or an action the environment refused, named by the environment's
`EnvSpec.refusal_kind` (TextCraft: "made-up recipe", "missing ingredients", ...). An episode
in which nothing was refused is filed under how it ended (the turn limit, the context limit).
Beside it, how many failed episodes resent a refused action word for word: a loop that
changes nothing. Where the environment has a breakdown key (TextCraft: depth) the same
table follows for each group: what fails at depth 1 is not what fails at depth 3.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich import box
from rich.table import Table

from agenttrain.envs.base import EnvSpec
from agenttrain.eval.breakdown import group_of, heading
from agenttrain.rl.rewards import looping_turns
from agenttrain.rollout.trajectory import Trajectory

FORMAT_ERROR = "format error"
CUT_OFF = "format error: reply cut off at the token limit"
REFUSED = "refused action"
ENDINGS = {
    "max_turns": "nothing refused: turn limit",
    "context_limit": "nothing refused: context limit",
    "format_error": "nothing refused: format errors",
    "done": "nothing refused: ended unsolved",
}
LOOPS = "resent a refused action"


@dataclass
class FailureView:
    kinds: list[str]
    """Failure kinds, the most frequent over all runs first."""
    counts: dict[str, Counter[str]]
    """Run label -> kind -> failed episodes of that kind."""
    failed: dict[str, tuple[int, int]]
    """Run label -> (failed, scored episodes); env and agent errors are not scored."""
    loops: dict[str, int] | None
    """Run label -> failed episodes that resent a refused action; None when the
    environment cannot tell a refusal."""


def first_failure(trajectory: Trajectory, kind_of: Callable[[str], str | None]) -> str:
    """The first thing that went wrong in a failed episode (see the module's docstring)."""
    for turn in trajectory.turns:
        if turn.format_error:
            return CUT_OFF if turn.cut_off else FORMAT_ERROR
        if turn.action is not None:
            kind = kind_of(turn.observation)
            if kind is not None:
                return kind
    return ENDINGS.get(trajectory.finish_reason or "", "nothing refused")


def _kind_reader(spec: EnvSpec | None) -> Callable[[str], str | None]:
    if spec is not None and spec.refusal_kind is not None:
        return spec.refusal_kind
    if spec is not None and spec.refused is not None:
        refused = spec.refused
        return lambda observation: REFUSED if refused(observation) else None
    return lambda observation: None


def failure_view(
    runs: Sequence[tuple[str, Sequence[Trajectory]]], spec: EnvSpec | None
) -> FailureView | None:
    """The failures of `runs` ((label, episodes)); None when no run has a scored failure."""
    kind_of = _kind_reader(spec)
    counts: dict[str, Counter[str]] = {}
    failed: dict[str, tuple[int, int]] = {}
    loops: dict[str, int] = {}
    for label, trajectories in runs:
        scored = [t for t in trajectories if not t.errored]
        failures = [t for t in scored if not t.success]
        counts[label] = Counter(first_failure(t, kind_of) for t in failures)
        failed[label] = (len(failures), len(scored))
        if spec is not None and spec.refused is not None:
            loops[label] = sum(looping_turns(t, spec.refused) > 0 for t in failures)
    total = sum(counts.values(), Counter())
    if not total:
        return None
    kinds = [kind for kind, _ in total.most_common()]
    return FailureView(kinds, counts, failed, loops if loops else None)


def failure_views_by(
    runs: Sequence[tuple[str, Sequence[Trajectory]]],
    spec: EnvSpec | None,
    key: str,
    groups: Sequence[str],
) -> dict[str, FailureView]:
    """`failure_view` within each of the breakdown's `groups` of `key` (groups without a
    failure left out)."""
    views = {}
    for group in groups:
        within = [(label, [t for t in ts if group_of(t, key) == group]) for label, ts in runs]
        view = failure_view(within, spec)
        if view is not None:
            views[group] = view
    return views


def _cell(view: FailureView, label: str, count: int) -> str:
    failed = view.failed[label][0]
    return f"{count} ({count / failed:.0%})" if failed else "-"


def failure_rows(view: FailureView) -> list[list[str]]:
    """One row per kind (then the loops), one cell per run: episodes and share of its
    failures."""
    rows = [["failed / scored", *(f"{failed}/{scored}" for failed, scored in view.failed.values())]]
    labels = list(view.failed)
    for kind in view.kinds:
        rows.append([kind, *(_cell(view, label, view.counts[label][kind]) for label in labels)])
    if view.loops is not None:
        rows.append([LOOPS, *(_cell(view, label, view.loops[label]) for label in labels)])
    return rows


def failures_section(
    view: FailureView, by_group: dict[str, FailureView], key: str | None
) -> list[str]:
    """compare.md's "How episodes failed", overall then within each group of `key`."""
    labels = list(view.failed)
    lines = [
        "## How episodes failed",
        "",
        "Each failed episode under the first thing that went wrong in it: a reply in the "
        "wrong format, or the kind of the first action the environment refused; episodes "
        "with neither under how they ended. Cells: failed episodes (share of the run's "
        "failures). Last row: failed episodes that sent a refused action again, word for "
        "word.",
        "",
    ]
    lines += _markdown_table(view, labels)
    for group, within in by_group.items():
        head = heading(key, group) if key else group
        lines += [f"### {head}", "", *_markdown_table(within, labels)]
    return lines


def _markdown_table(view: FailureView, labels: list[str]) -> list[str]:
    lines = ["| | " + " | ".join(labels) + " |", "|---" + "|---:" * len(labels) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in failure_rows(view)]
    return [*lines, ""]


def failures_table(view: FailureView) -> Table:
    """The terminal's view, runs numbered (the caption says which is which)."""
    legend = "; ".join(f"#{i} {label}" for i, label in enumerate(view.failed, 1))
    table = Table(title="how episodes failed", caption=legend, box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("first thing that went wrong", no_wrap=True)
    for number in range(1, len(view.failed) + 1):
        table.add_column(f"#{number}", justify="right", no_wrap=True)
    for row in failure_rows(view):
        table.add_row(*row)
    return table
