"""`agenttrain compare`: evaluations side by side, each against the first on the tasks both played.

An argument is an `agenttrain eval` output folder (every model in it, in the order eval ran
them), one model's folder in it, or a trajectory JSONL file (`episodes.jsonl`); several
evaluations of one model each joined by `+` are one pooled run (seeds of one arm). Each run gets
its headline numbers over all of its episodes; each run after the first also gets the paired
difference to the first over the tasks both played (a paired bootstrap over those tasks), and
an evaluation that shares no task with the first is refused, not compared on different tasks.

`compare.md` is built from `SECTIONS`, each a function of the comparison and the output
folder that returns its markdown (and writes its plots): a view of the runs that only some
environments have is one more section, as the distribution of each field of JSON actions
(`eval/decisions.py`) is.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")  # files only; never a window
import matplotlib.pyplot as plt
from rich import box
from rich.table import Table

from agenttrain.eval.breakdown import (
    BreakdownView,
    breakdown_section,
    breakdown_view,
    described,
)
from agenttrain.eval.decisions import (
    QUANTILES,
    SIGNIFICANCE,
    DecisionView,
    FieldStats,
    KSTest,
    decision_view,
    plot_field,
    plot_name,
)
from agenttrain.eval.failures import (
    FailureView,
    failure_view,
    failure_views_by,
    failures_section,
)
from agenttrain.eval.metrics import (
    BOOTSTRAP_RESAMPLES,
    CONFIDENCE,
    Difference,
    bootstrap_interval,
    paired_difference,
    summarize,
    task_parts,
)
from agenttrain.eval.report import with_interval
from agenttrain.rollout.trajectory import Trajectory, read_jsonl

if TYPE_CHECKING:
    from agenttrain.envs.base import EnvSpec

EPISODES_FILE = "episodes.jsonl"
POOL = "+"
"""Joins evaluations pooled into one run: `eval-s0+eval-s1+eval-s2`."""
EXPECTED = (
    "an `agenttrain eval` output folder (with <model>/episodes.jsonl), one model's folder in "
    "it, or a trajectory JSONL file"
)

COMPARED = {
    "success_rate": "success",
    "mean_reward": "mean reward",
    "parse_rate": "parse rate",
    "format_error_episodes": "format-error episodes",
    "mean_turns": "mean turns",
}
"""Metrics with a paired difference to the first run, and their titles."""
_WITH_CI = ("success_rate", "mean_reward", "format_error_episodes")
"""Those whose own interval each run's summary carries."""


class CompareError(ValueError):
    """An argument that is not an evaluation, or runs that cannot be compared."""


@dataclass
class Run:
    """One model's episodes from one evaluation."""

    label: str
    source: Path
    trajectories: list[Trajectory]
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass
class Comparison:
    runs: list[Run]
    differences: dict[str, dict[str, Difference | None]]
    """Per run after the first: metric -> its difference to the first (None: no scored task
    in common for that metric)."""
    shared_tasks: dict[str, int]
    decisions: DecisionView | None = None
    """JSON actions' parse rate and field distributions; None when no run acts in JSON."""
    breakdown: BreakdownView | None = None
    """Success by the environment's breakdown key (TextCraft: depth); None without one."""
    failures: FailureView | None = None
    """What went wrong first in each failed episode; None when no run failed."""
    failures_by_group: dict[str, FailureView] = field(default_factory=dict)
    """The same within each group of the breakdown key (groups with a failure)."""

    @property
    def first(self) -> Run:
        return self.runs[0]


def episode_files(path: Path) -> list[Path]:
    """The trajectory files an argument stands for, in the order its evaluation ran them."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise CompareError(f"{path}: no such file or folder; expected {EXPECTED}")
    if (path / EPISODES_FILE).is_file():
        return [path / EPISODES_FILE]
    files = sorted(path.glob(f"*/{EPISODES_FILE}"), key=lambda f: _eval_order(path).get(f, 0))
    if not files:
        raise CompareError(f"{path} is not an evaluation: expected {EXPECTED}")
    return files


def _eval_order(folder: Path) -> dict[Path, int]:
    """Each model's episodes file -> its place in the evaluation's summary.json (eval writes
    the models in the order it ran them; the first is the baseline)."""
    summary = folder / "summary.json"
    if not summary.is_file():
        return {}
    from agenttrain.eval.runner import slug

    models = list(json.loads(summary.read_text()))
    return {folder / slug(model) / EPISODES_FILE: index for index, model in enumerate(models)}


def read_run(file: Path) -> Run:
    """One file's episodes; an unreadable or empty file is an error naming it."""
    try:
        trajectories = list(read_jsonl(file))
    except (ValueError, UnicodeDecodeError) as problem:
        raise CompareError(
            f"{file} is not an evaluation ({problem}); expected {EXPECTED}"
        ) from None
    if not trajectories:
        raise CompareError(f"{file} holds no episodes; expected {EXPECTED}")
    return Run(trajectories[0].model, file, trajectories)


def pooled_run(path: Path) -> Run:
    """`a+b+c`: evaluations of one model each (the seeds of one training command, say) as one
    run, each task's samples from all of them together; they must have played the same tasks."""
    members = [read_run(file) for part in str(path).split(POOL) for file in _one_model(Path(part))]
    tasks = _task_keys(members[0])
    for member in members[1:]:
        if _task_keys(member) != tasks:
            raise CompareError(
                f"{path}: {member.source} played other tasks than {members[0].source}; "
                "pooled evaluations must cover the same tasks (same --env, --split, --tasks)"
            )
    trajectories = [t for member in members for t in member.trajectories]
    return Run(f"pooled: {_pooled_name(members)}", path, trajectories)


def _pooled_name(members: list[Run]) -> str:
    """eval-s0+eval-s1 where the evaluation folders' names tell the members apart; else their
    models, or their paths, with what they share written once: runs/{a,b}/sft/checkpoints/step-19
    (the recipe's layout, where every evaluation folder is called eval)."""
    names = [_evaluation_name(member.source) for member in members]
    if len(set(names)) == len(names):
        return "+".join(names)
    models = [member.trajectories[0].model for member in members]
    if len(set(models)) == len(models):
        return _brace(models)
    return _brace([str(member.source) for member in members])


def _brace(paths: list[str]) -> str:
    """Paths as one, the shared leading and trailing parts once: a/{b,c/d}/e."""
    parts = [path.split("/") for path in paths]
    shortest = min(len(p) for p in parts)
    lead = 0
    while lead < shortest - 1 and len({p[lead] for p in parts}) == 1:
        lead += 1
    trail = 0
    while trail < shortest - lead - 1 and len({p[-1 - trail] for p in parts}) == 1:
        trail += 1
    middles = ",".join("/".join(p[lead : len(p) - trail]) for p in parts)
    return "/".join([*parts[0][:lead], f"{{{middles}}}", *parts[0][len(parts[0]) - trail :]])


def _one_model(path: Path) -> list[Path]:
    files = episode_files(path)
    if len(files) != 1:
        raise CompareError(
            f"{path} holds {len(files)} models; pool one model's evaluations (its folder, "
            "e.g. eval-a/<model>, or its episodes.jsonl)"
        )
    return files


def _runs_of(path: Path) -> list[Run]:
    if POOL in str(path) and not path.exists():
        return [pooled_run(path)]
    return [read_run(file) for file in episode_files(path)]


def load_runs(paths: Sequence[Path]) -> list[Run]:
    """Every run the arguments stand for; a model seen twice is labelled by its evaluation
    folder too (by its whole path if that is not enough)."""
    runs = [run for path in paths for run in _runs_of(path)]
    models = [run.label for run in runs]
    for run in runs:
        if models.count(run.label) > 1:
            run.label = f"{run.label} ({_evaluation_name(run.source)})"
    labels = [run.label for run in runs]
    for run in runs:
        if labels.count(run.label) > 1:
            run.label = f"{run.trajectories[0].model} ({run.source})"
    return runs


def _evaluation_name(file: Path) -> str:
    """eval-a for eval-a/<model>/episodes.jsonl; the file's stem for a loose file."""
    return file.parent.parent.name if file.name == EPISODES_FILE else file.stem


def headline(trajectories: Sequence[Trajectory]) -> dict[str, Any]:
    """eval's summary plus what a comparison reads: parse rate and format-error episodes."""
    summary = summarize(trajectories)
    episodes = [t for t in trajectories if not t.errored]
    summary["parse_rate"] = 1.0 - summary["format_error_rate"]
    summary["format_error_episodes"] = (
        sum(t.format_errors > 0 for t in episodes) / len(episodes) if episodes else 0.0
    )
    summary["format_error_episodes_ci"] = bootstrap_interval(
        task_parts(trajectories, "format_error_episodes")
    )
    return summary


def difference(first: Run, other: Run, metric: str) -> Difference | None:
    """`other - first` on one metric over their shared tasks; parse rate is 1 minus the
    format-error share of turns, so its difference is that one's, negated."""
    if metric == "parse_rate":
        errors = difference(first, other, "format_error_rate")
        if errors is None:
            return None
        flipped = (0.0 - value for value in (errors.estimate, errors.high, errors.low))
        return Difference(*flipped, errors.tasks)
    return paired_difference(
        task_parts(first.trajectories, metric), task_parts(other.trajectories, metric)
    )


def _task_keys(run: Run) -> set[tuple[str, int]]:
    return {(t.env, t.task_id) for t in run.trajectories}


def compare(paths: Sequence[Path], by: str | None = None) -> Comparison:
    """Load the runs, refuse what cannot be compared, measure each against the first; success
    broken down by the task attributes `by` names (default: the environment's breakdown key)."""
    runs = load_runs(paths)
    if len(runs) < 2:
        raise CompareError(
            f"{', '.join(map(str, paths))} hold{'s' if len(paths) == 1 else ''} one run; "
            "compare needs two or more (another evaluation, or a folder with several models)"
        )
    for run in runs:
        run.summary = headline(run.trajectories)
    first = runs[0]
    shared = {run.label: len(_task_keys(first) & _task_keys(run)) for run in runs[1:]}
    unshared = [label for label, count in shared.items() if count == 0]
    if unshared:
        envs = sorted({t.env for t in first.trajectories})
        raise CompareError(
            f"{', '.join(unshared)} shares no task with {first.label} ({first.source}: "
            f"{len(_task_keys(first))} {'/'.join(envs)} tasks); paired differences need "
            "evaluations of the same tasks (same --env, --split and --tasks)"
        )
    differences = {
        run.label: {metric: difference(first, run, metric) for metric in COMPARED}
        for run in runs[1:]
    }
    labelled = [(run.label, run.trajectories) for run in runs]
    spec = _single_spec(runs)
    decisions = decision_view(labelled, (spec.action_fields or None) if spec else None)
    breakdown = _breakdown(labelled, spec, by)
    failures = failure_view(labelled, spec)
    by_group = (
        failure_views_by(labelled, spec, breakdown.key, breakdown.groups) if breakdown else {}
    )
    return Comparison(runs, differences, shared, decisions, breakdown, failures, by_group)


def _breakdown(
    runs: Sequence[tuple[str, Sequence[Trajectory]]], spec: EnvSpec | None, by: str | None
) -> BreakdownView | None:
    """The environment's own breakdown, or the one `by` asks for: refused by name when it
    does not split the episodes into two or more groups."""
    if by is None:
        return breakdown_view(runs, spec.breakdown_key if spec else None)
    if spec is not None and spec.describe is not None:
        for _, trajectories in runs:
            described(trajectories, by, spec.describe)
    view = breakdown_view(runs, by)
    if view is None:
        recorded = sorted({name for _, ts in runs for t in ts for name in t.task_info})
        raise CompareError(
            f"--by {by}: the episodes do not fall into two or more groups of it; the task "
            f"attributes they record: {', '.join(recorded) or 'none'}"
        )
    return view


def _single_spec(runs: Sequence[Run]) -> EnvSpec | None:
    """The runs' environment when they all play one that is installed (None otherwise): what
    it declares (JSON action fields, a breakdown key) shapes the comparison's views. Without
    JSON fields a malformed reply's stray keys get no distribution of their own."""
    from agenttrain.envs import get_spec

    envs = {t.env for run in runs for t in run.trajectories}
    if len(envs) != 1:
        return None
    try:
        return get_spec(envs.pop())
    except (KeyError, ValueError):
        return None


def _signed(difference: Difference | None) -> str:
    if difference is None:
        return "-"
    text = with_interval(difference.estimate, (difference.low, difference.high), signed=True)
    return text + (" *" if difference.excludes_zero else "")


def _value(summary: dict[str, Any], key: str) -> str:
    return with_interval(summary[key], summary.get(f"{key}_ci"))


def runs_table(comparison: Comparison) -> Table:
    """The headline numbers of every run, each over all of its own episodes."""
    table = Table(title="runs", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    table.add_column("run", overflow="fold", min_width=12)
    for title in ("success [95% CI]", "reward", "parse", "fmt eps", "turns", "env err"):
        table.add_column(title, justify="right", no_wrap=True)
    for run in comparison.runs:
        s = run.summary
        table.add_row(
            run.label,
            _value(s, "success_rate"),
            f"{s['mean_reward']:.3f}",
            f"{s['parse_rate']:.3f}",
            f"{s['format_error_episodes']:.3f}",
            f"{s['mean_turns']:.2f}",
            str(s["env_errors"]),
        )
    return table


def differences_table(comparison: Comparison) -> Table:
    """Each later run minus the first, over the tasks both played."""
    table = Table(
        title=f"minus {comparison.first.label}",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    table.add_column("run", overflow="fold", min_width=12)
    table.add_column("tasks", justify="right", no_wrap=True)
    for title in ("Δ success", "Δ reward"):
        table.add_column(title, justify="right", no_wrap=True)
    for label, by_metric in comparison.differences.items():
        table.add_row(
            label,
            str(comparison.shared_tasks[label]),
            _signed(by_metric["success_rate"]),
            _signed(by_metric["mean_reward"]),
        )
    return table


def decision_tables(view: DecisionView) -> list[Table]:
    """The runs' JSON decisions (parse rate, −1 share, reward), then each numeric field's
    distribution per run with its test against the first."""
    runs = Table(title="JSON decisions", box=box.SIMPLE_HEAD, pad_edge=False)
    runs.add_column("run", overflow="fold", min_width=12)
    for title in ("turns", "JSON parse", "−1 share", "reward"):
        runs.add_column(title, justify="right", no_wrap=True)
    for run in view.runs:
        runs.add_row(
            run.label,
            str(run.turns),
            f"{run.parse_rate:.3f}",
            f"{run.minus_one_share:.3f}",
            _number(run.mean_reward),
        )
    fields = Table(title="decision fields", box=box.SIMPLE_HEAD, pad_edge=False)
    fields.add_column("field", overflow="fold")
    fields.add_column("run", overflow="fold", min_width=12)
    for title in ("n", "mean", "std", "q25", "median", "q75", "KS D", "p"):
        fields.add_column(title, justify="right", no_wrap=True)
    for name in view.fields:
        for run in view.runs:
            stats = view.stats[name][run.label]
            test = view.tests[name].get(run.label)
            fields.add_row(
                name, run.label, *_stats_cells(stats, (0.25, 0.5, 0.75)), *_test_cells(test)
            )
    return [runs, fields]


def _number(value: float) -> str:
    return "-" if value != value else f"{value:.3f}"  # nan: not defined (too few values)


def _stats_cells(stats: FieldStats | None, quantiles: Sequence[float]) -> list[str]:
    if stats is None:
        return ["0", *("-" * (2 + len(quantiles)))]
    cells = [str(stats.count), _number(stats.mean), _number(stats.std)]
    return cells + [_number(stats.quantiles[q]) for q in quantiles]


def _test_cells(test: KSTest | None) -> list[str]:
    if test is None:
        return ["-", "-"]
    return [f"{test.statistic:.3f}", f"{test.p_value:.3g}" + (" *" if test.differs else "")]


TERMINAL_NOTE = (
    f"[low, high]: {CONFIDENCE:.0%} bootstrap interval over tasks; Δ: paired over the shared "
    "tasks; * the interval excludes 0. parse: share of turns without a format error; "
    "fmt eps: share of episodes with one or more."
)


def _runs_section(comparison: Comparison, out: Path) -> list[str]:
    titles = ["run", "source", "tasks", "episodes", "env errors"]
    titles += [
        f"{COMPARED[m]} [{CONFIDENCE:.0%} CI]" if m in _WITH_CI else COMPARED[m] for m in COMPARED
    ]
    lines = ["## Runs", "", "| " + " | ".join(titles) + " |", "|---" * len(titles) + "|"]
    for run in comparison.runs:
        s = run.summary
        cells = [
            run.label,
            f"`{run.source}`",
            str(s["tasks"]),
            str(s["episodes"]),
            str(s["env_errors"]),
        ]
        cells += [_value(s, m) for m in COMPARED]
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def _differences_section(comparison: Comparison, out: Path) -> list[str]:
    titles = ["run", "shared tasks", *(f"Δ {COMPARED[m]}" for m in COMPARED)]
    lines = [
        f"## Differences to {comparison.first.label}",
        "",
        "| " + " | ".join(titles) + " |",
        "|---" * len(titles) + "|",
    ]
    for label, by_metric in comparison.differences.items():
        cells = [label, str(comparison.shared_tasks[label])]
        cells += [_signed(by_metric[m]) for m in COMPARED]
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def _plot_section(comparison: Comparison, out: Path) -> list[str]:
    plot_success(comparison, out / "compare.png")
    return ["![success with 95% intervals](compare.png)", ""]


def plot_success(comparison: Comparison, path: Path) -> None:
    """Success of each run and each later run's difference to the first, with interval bars."""
    figure, (rates, deltas) = plt.subplots(
        1, 2, figsize=(max(7, 1.4 * len(comparison.runs) + 4), 3.8)
    )
    labels = [_short(run.label) for run in comparison.runs]
    values, low, high = [], [], []
    for run in comparison.runs:
        value = run.summary["success_rate"]
        if value is None:  # no scored episode: no bar
            value = float("nan")
        interval = run.summary["success_rate_ci"] or (value, value)
        values.append(value)
        low.append(value - interval[0])
        high.append(interval[1] - value)
    rates.bar(labels, values, yerr=[low, high], capsize=4, color="tab:blue")
    rates.set_ylim(0, 1.05)
    rates.set_ylabel("success rate")
    rates.set_title(f"success, {CONFIDENCE:.0%} bootstrap interval over tasks", fontsize=9)
    later = [(label, by["success_rate"]) for label, by in comparison.differences.items()]
    shown = [(label, d) for label, d in later if d is not None]
    deltas.bar(
        [_short(label) for label, _ in shown],
        [d.estimate for _, d in shown],
        yerr=[[d.estimate - d.low for _, d in shown], [d.high - d.estimate for _, d in shown]],
        capsize=4,
        color=["tab:green" if d.estimate >= 0 else "tab:red" for _, d in shown],
    )
    deltas.axhline(0, color="black", linewidth=0.8)
    deltas.set_ylabel(f"success − {_short(comparison.first.label)}")
    deltas.set_title("paired difference over shared tasks", fontsize=9)
    for axes in (rates, deltas):
        axes.tick_params(axis="x", labelrotation=15, labelsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _short(label: str) -> str:
    return label if len(label) <= 28 else "…" + label[-27:]


def _decisions_section(comparison: Comparison, out: Path) -> list[str]:
    """Only for runs whose actions are JSON objects: parse rate, −1 share, and each numeric
    field's distribution per run, tested against the first, with its plot."""
    view = comparison.decisions
    if view is None:
        return []
    lines = [
        "## JSON decisions",
        "",
        "A turn's decision is its action when that is one JSON object (a reply the format "
        "rejected counts when it is one JSON object as a whole). JSON parse: share of turns "
        "with a decision; −1 share: share of scored episodes with reward −1 (the format "
        "rule's); fields: every numeric field, std with ddof=1; KS: two-sample "
        f"Kolmogorov–Smirnov test against {view.runs[0].label} (asymptotic p-value), * p < "
        f"{SIGNIFICANCE}.",
        "",
        "| run | turns | decisions | JSON parse rate | −1 share | mean reward |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for run in view.runs:
        lines.append(
            f"| {run.label} | {run.turns} | {len(run.decisions)} | {run.parse_rate:.3f} | "
            f"{run.minus_one_share:.3f} | {_number(run.mean_reward)} |"
        )
    titles = ["run", "n", "mean", "std", *(f"q{q * 100:g}" for q in QUANTILES), "KS D", "p"]
    for index, name in enumerate(view.fields):
        lines += ["", f"### `{name}`", "", "| " + " | ".join(titles) + " |"]
        lines.append("|---" + "|---:" * (len(titles) - 1) + "|")
        for run in view.runs:
            cells = _stats_cells(view.stats[name][run.label], QUANTILES)
            cells += _test_cells(view.tests[name].get(run.label))
            lines.append(f"| {run.label} | " + " | ".join(cells) + " |")
        if any(view.stats[name].values()):
            plot_field(view, name, out / plot_name(index, name))
            lines += ["", f"![{name} per run]({plot_name(index, name)})"]
    return [*lines, ""]


def _breakdown_section(comparison: Comparison, out: Path) -> list[str]:
    view = comparison.breakdown
    return breakdown_section(view, comparison.first.label) if view else []


def _failures_section(comparison: Comparison, out: Path) -> list[str]:
    view, by_group = comparison.failures, comparison.failures_by_group
    key = comparison.breakdown.key if comparison.breakdown else None
    return failures_section(view, by_group, key) if view else []


SECTIONS: list[Callable[[Comparison, Path], list[str]]] = [
    _runs_section,
    _differences_section,
    _plot_section,
    _breakdown_section,
    _failures_section,
    _decisions_section,
]
"""The parts of compare.md, in order; a new view of the runs is one more function here."""


def write_markdown(comparison: Comparison, out: Path, command: str) -> Path:
    """compare.md (and its plots) in `out`; returns its path."""
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        "# Comparison",
        "",
        f"Command: `{command}`",
        "",
        f"Baseline: {comparison.first.label}. Each run's own numbers are over all of its "
        "episodes; each difference is the run minus the baseline over the tasks both played "
        f"(the count is given), with a {CONFIDENCE:.0%} paired percentile bootstrap interval "
        f"({BOOTSTRAP_RESAMPLES:,} resamples of those tasks, the same tasks drawn for both; a "
        "drawn task brings all its samples); * the interval excludes 0. Success and reward "
        "leave out episodes that ended in an environment error; parse rate: share of turns "
        "without a format error; format-error episodes: share of episodes with one or more.",
        "",
    ]
    for section in SECTIONS:
        lines += section(comparison, out)
    path = out / "compare.md"
    path.write_text("\n".join(lines) + "\n")
    return path
