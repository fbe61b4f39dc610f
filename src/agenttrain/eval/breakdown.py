"""Success by a task attribute (TextCraft: depth) in `agenttrain compare`.

A headline gain can come from the easy goals alone. Per value of the environment's breakdown
key (or of the attributes `--by` names, comma-separated: `depth,ingredients` groups by both),
each run's solved episodes, and each later run minus the first within that group, paired over
the group's shared tasks (the same bootstrap as the headline difference).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich import box
from rich.table import Table

from agenttrain.eval.metrics import Difference, paired_difference, task_parts
from agenttrain.eval.report import with_interval
from agenttrain.rollout.trajectory import Trajectory


@dataclass
class BreakdownView:
    key: str
    """The task_info attribute grouped by (`EnvSpec.breakdown_key`, or `--by`: one or more,
    comma-separated)."""
    groups: list[str]
    solved: dict[str, dict[str, tuple[int, int]]]
    """Run label -> group -> (solved, scored episodes); env errors are not scored."""
    differences: dict[str, dict[str, Difference | None]]
    """Later run label -> group -> its success minus the first run's (None: no shared task)."""


SEPARATOR = " · "
"""Between the attributes of a group of several keys: `depth 1 · ingredients 2`."""


def keys_of(key: str) -> list[str]:
    """The attributes a breakdown key names: `depth,ingredients` -> [depth, ingredients]."""
    return [part.strip() for part in key.split(",") if part.strip()]


def group_of(trajectory: Trajectory, key: str) -> str | None:
    """The episode's group: the attribute's value, or `name value` per attribute of a key of
    several; None when the episode lacks one of them."""
    keys = keys_of(key)
    values = [trajectory.task_info.get(name) for name in keys]
    if any(value is None for value in values):
        return None
    if len(keys) == 1:
        return str(values[0])
    return SEPARATOR.join(f"{name} {value}" for name, value in zip(keys, values, strict=True))


def title(key: str) -> str:
    """`depth` -> depth, `depth,ingredients` -> depth and ingredients."""
    return " and ".join(keys_of(key))


def heading(key: str, group: str) -> str:
    """A group's column head: `depth 1` (one attribute), the group itself (several)."""
    return f"{key} {group}" if len(keys_of(key)) == 1 else group


def _values_of(group: str) -> list[str]:
    """`depth 1 · ingredients 2` -> [1, 2]; a group of one attribute is its value already."""
    if SEPARATOR not in group:
        return [group]
    return [part.rsplit(" ", 1)[-1] for part in group.split(SEPARATOR)]


def _values(group: str) -> str:
    """`depth 1 · ingredients 2` -> `1 · 2`, for a terminal column headed by the names."""
    return SEPARATOR.join(_values_of(group))


def _order(group: str) -> list[tuple[int, float, str]]:
    """Numbers in numeric order (depth 2 before depth 10), then names; attribute by attribute."""
    parts = []
    for value in _values_of(group):
        try:
            parts.append((0, float(value), value))
        except ValueError:
            parts.append((1, 0.0, value))
    return parts


def described(
    trajectories: Sequence[Trajectory], key: str, describe: Callable[[str], dict[str, object]]
) -> None:
    """Fill attributes of `key` that older episodes did not record (a new attribute of the
    environment's `describe`) from their first observation, the first user message it can
    read. In place; episodes it cannot read keep what they have."""
    wanted = keys_of(key)
    for trajectory in trajectories:
        if all(name in trajectory.task_info for name in wanted):
            continue
        for message in trajectory.messages:
            found = describe(message["content"]) if message.get("role") == "user" else {}
            if found:
                trajectory.task_info = {**found, **trajectory.task_info}
                break


def breakdown_view(
    runs: Sequence[tuple[str, Sequence[Trajectory]]], key: str | None
) -> BreakdownView | None:
    """The breakdown of `runs` ((label, episodes), the first the baseline) by `key`; None
    without a key or with fewer than two groups (nothing the headline does not say)."""
    if key is None:
        return None
    grouped: dict[str, dict[str, list[Trajectory]]] = {}
    for label, trajectories in runs:
        mine = grouped.setdefault(label, {})
        for trajectory in trajectories:
            group = group_of(trajectory, key)
            if group is not None:
                mine.setdefault(group, []).append(trajectory)
    groups = sorted({g for by_group in grouped.values() for g in by_group}, key=_order)
    if len(groups) < 2:
        return None
    solved = {
        label: {group: _solved(episodes) for group, episodes in by_group.items()}
        for label, by_group in grouped.items()
    }
    first, *later = (label for label, _ in runs)
    differences = {
        label: {
            group: paired_difference(
                task_parts(grouped[first].get(group, []), "success_rate"),
                task_parts(grouped[label].get(group, []), "success_rate"),
            )
            for group in groups
        }
        for label in later
    }
    return BreakdownView(key, groups, solved, differences)


def _solved(episodes: Sequence[Trajectory]) -> tuple[int, int]:
    scored = [t for t in episodes if not t.errored]
    return sum(t.success for t in scored), len(scored)


def _count(view: BreakdownView, label: str, group: str) -> str:
    if group not in view.solved[label]:
        return "-"
    solved, scored = view.solved[label][group]
    return f"{solved}/{scored}"


def _delta(difference: Difference | None) -> str:
    if difference is None:
        return "-"
    text = with_interval(difference.estimate, (difference.low, difference.high), signed=True)
    return text + (" *" if difference.excludes_zero else "")


def breakdown_section(view: BreakdownView, first: str) -> list[str]:
    """compare.md's "Success by <key>": solved/scored per run, then the paired differences."""
    heads = [heading(view.key, group) for group in view.groups]
    lines = [
        f"## Success by {title(view.key)}",
        "",
        "Solved / scored episodes per group; below, each run minus "
        f"{first} within the group, paired over the group's shared tasks.",
        "",
        "| run | " + " | ".join(heads) + " |",
        "|---" + "|---:" * len(heads) + "|",
    ]
    for label in view.solved:
        cells = [_count(view, label, group) for group in view.groups]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    if view.differences:
        lines += ["", "| Δ success | " + " | ".join(heads) + " |"]
        lines.append("|---" + "|---:" * len(heads) + "|")
        for label, by_group in view.differences.items():
            cells = [_delta(by_group[group]) for group in view.groups]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def breakdown_table(view: BreakdownView) -> Table:
    """The terminal's view, one row per group: each run's solved/scored (runs numbered as in
    `legend`), then each later run's Δ success against run #1."""
    labels = list(view.solved)
    table = Table(
        title=f"success by {title(view.key)}",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    table.add_column(SEPARATOR.join(keys_of(view.key)), no_wrap=True)
    for number in range(1, len(labels) + 1):
        table.add_column(f"#{number}", justify="right", no_wrap=True)
    for number in range(2, len(labels) + 1):
        table.add_column(f"Δ #{number}", justify="right", no_wrap=True)
    for group in view.groups:
        counts = [_count(view, label, group) for label in labels]
        deltas = [_delta(view.differences[label][group]) for label in labels[1:]]
        table.add_row(_values(group), *counts, *deltas)
    return table


def legend(view: BreakdownView) -> str:
    """Which run each column number of `breakdown_table` is."""
    return "; ".join(f"#{i} {label}" for i, label in enumerate(view.solved, 1))
