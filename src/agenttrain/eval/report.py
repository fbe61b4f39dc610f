"""`report.md` and plots for an evaluation (one model, or several side by side)."""

from __future__ import annotations

from collections.abc import Sequence
from math import nan
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never a window
import matplotlib.pyplot as plt

from agenttrain.eval.metrics import BOOTSTRAP_RESAMPLES, CONFIDENCE, differences_to_first
from agenttrain.rollout.trajectory import FINISH_REASONS, Trajectory, read_jsonl

LABELS = {
    "success_rate": "success (scored)",
    "success_rate_all": "success (all)",
    "env_errors": "env errors",
    "agent_errors": "agent errors",
}
"""Column titles where the key alone would not say which episodes a number counts."""

RATES_NOTE = (
    "success (scored): successes / episodes without an environment or agent error; "
    "success (all): successes / all episodes, each error counted as a failure; "
    "'-': no episode to count."
)


INTERVAL_NOTE = (
    f"[low, high]: {CONFIDENCE:.0%} percentile bootstrap interval over tasks "
    f"({BOOTSTRAP_RESAMPLES:,} resamples; a drawn task brings all its samples)."
)


def _or_nan(value: float | None) -> float:
    """For plots: no result is a missing bar (NaN), not a bar at 0."""
    return float("nan") if value is None else value


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return "-" if value is None else str(value)


def with_interval(
    value: float | None, interval: Sequence[float] | None, signed: bool = False
) -> str:
    """'0.375 [0.30, 0.45]' (signed: '+0.125 [+0.05, +0.20]'); the value alone without one;
    '-' for no result (a rate without a denominator)."""
    if value is None:
        return "-"
    sign = "+" if signed else ""
    text = f"{value:{sign}.3f}"
    if interval is None:
        return text
    low, high = interval
    return f"{text} [{low:{sign}.2f}, {high:{sign}.2f}]"


def difference_cell(difference: dict[str, Any] | None) -> str:
    """A paired difference and its interval, starred when the interval excludes 0."""
    if difference is None:
        return "-"
    text = with_interval(difference["estimate"], (difference["low"], difference["high"]), True)
    return text + (" *" if difference["excludes_zero"] else "")


def at_k_keys(summaries: Sequence[dict[str, Any]]) -> list[str]:
    """The avg@n and pass@k keys present in any summary, avg first, then by k."""
    return sorted(
        {k for s in summaries for k in s if k.startswith(("pass@", "avg@"))},
        key=lambda k: (k.split("@")[0], int(k.split("@")[1])),
    )


def metric_cell(summary: dict[str, Any], key: str, interval: bool = True) -> str:
    """A metric's value, with its interval where the summary has one (and `interval`);
    pass@k/avg@n say over how many tasks when env errors cost some."""
    if interval and summary.get(f"{key}_ci") is not None:
        return with_interval(summary[key], summary[f"{key}_ci"])
    text = _fmt(summary.get(key))
    counted = summary.get("tasks_per_metric", {}).get(key)
    if counted is not None and counted < summary.get("tasks", 0):
        text += f" ({counted}/{summary['tasks']} tasks)"
    return text


def env_error_lines(summaries: dict[str, dict[str, Any]]) -> list[str]:
    """One sentence per model that lost episodes to environment or agent errors."""
    lines = []
    for model, s in summaries.items():
        kinds = [
            f"{s[key]} of {s['episodes']} episodes ended in an {label} error "
            f"({s[key] / s['episodes']:.1%})"
            for key, label in (("env_errors", "environment"), ("agent_errors", "agent"))
            if s.get(key)
        ]
        if kinds:
            lines.append(
                f"{model}: {'; '.join(kinds)}; success (scored) {_fmt(s['success_rate'])}, "
                f"success (all) {_fmt(s['success_rate_all'])}"
            )
    return lines


def metrics_table(summaries: dict[str, dict[str, Any]]) -> str:
    """One row per model: both success rates, pass@k, avg@n and the other headline numbers."""
    columns = [
        "episodes",
        "env_errors",
        "agent_errors",
        "success_rate",
        "success_rate_all",
        *at_k_keys(list(summaries.values())),
        "mean_reward",
        "mean_turns",
        "format_error_rate",
        "env_error_rate",
        "generated_tokens",
        "tokens_per_s",
    ]
    titles = [LABELS.get(c, c) for c in columns]
    lines = ["| model | " + " | ".join(titles) + " |", "|---" * (len(columns) + 1) + "|"]
    for model, summary in summaries.items():
        lines.append(f"| {model} | " + " | ".join(metric_cell(summary, c) for c in columns) + " |")
    return "\n".join(lines)


def breakdown_table(summaries: dict[str, dict[str, Any]], key: str) -> str:
    groups = sorted({g for s in summaries.values() for g in s.get(f"by_{key}", {})})
    if not groups:
        return ""
    lines = [
        "| model | " + " | ".join(f"{key} {g}" for g in groups) + " |",
        "|---" * (len(groups) + 1) + "|",
    ]
    for model, summary in summaries.items():
        by = summary.get(f"by_{key}", {})
        cells = [_breakdown_cell(by[g]) if g in by else "-" for g in groups]
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _breakdown_cell(summary: dict[str, Any]) -> str:
    errors = summary.get("env_errors", 0) + summary.get("agent_errors", 0)
    # A group of errors alone has no success rate, not a rate of 0.
    rate = f"{summary['success_rate']:.2f}" if summary["scored_episodes"] else "-"
    if not errors:
        return f"{rate} (n={summary['episodes']})"
    return f"{rate} (n={summary['episodes']}, errors {errors})"


def finish_table(summaries: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| model | " + " | ".join(FINISH_REASONS) + " |",
        "|---" * (len(FINISH_REASONS) + 1) + "|",
    ]
    for model, summary in summaries.items():
        reasons = summary.get("finish_reasons", {})
        lines.append(
            f"| {model} | " + " | ".join(str(reasons.get(r, 0)) for r in FINISH_REASONS) + " |"
        )
    return "\n".join(lines)


def differences_table(differences: dict[str, dict[str, Any]]) -> str:
    """One row per model after the first: its paired success and reward difference to it."""
    lines = [
        "| model | tasks | Δ success | Δ mean reward |",
        "|---|---:|---:|---:|",
    ]
    for model, entry in differences.items():
        success = entry.get("success_rate")
        tasks = success["tasks"] if success else 0
        cells = [difference_cell(entry.get(key)) for key in ("success_rate", "mean_reward")]
        lines.append(f"| {model} | {tasks} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


DIFFERENCE_NOTE = (
    "Δ: the model minus the first, over the tasks both played; the interval is a paired "
    "bootstrap (each resample draws the same tasks for both models); * the interval "
    "excludes 0."
)


def plot_breakdown(summaries: dict[str, dict[str, Any]], key: str, path: Path) -> bool:
    groups = sorted({g for s in summaries.values() for g in s.get(f"by_{key}", {})})
    if not groups:
        return False
    figure, axes = plt.subplots(figsize=(max(5, 1.6 * len(groups) + 2), 3.5))
    width = 0.8 / max(1, len(summaries))
    for index, (model, summary) in enumerate(summaries.items()):
        by = summary.get(f"by_{key}", {})
        values = [_or_nan(by.get(g, {}).get("success_rate")) for g in groups]
        positions = [i + index * width for i in range(len(groups))]
        axes.bar(positions, values, width, label=_short(model))
    axes.set_xticks([i + width * (len(summaries) - 1) / 2 for i in range(len(groups))])
    axes.set_xticklabels([f"{key} {g}" for g in groups])
    axes.set_ylabel("success rate")
    axes.set_ylim(0, 1.05)
    axes.legend(fontsize=8)
    axes.set_title(f"success by {key}")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


def played_turns(trajectories: Sequence[Trajectory]) -> list[int]:
    """Turns per episode, leaving out env-error episodes: their count says where the
    environment failed, not how long the model took."""
    return [t.num_turns for t in trajectories if not t.errored]


def plot_distributions(episodes: dict[str, list[Trajectory]], path: Path) -> None:
    figure, (turns_axes, reward_axes) = plt.subplots(1, 2, figsize=(10, 3.5))
    for model, trajectories in episodes.items():
        turns = played_turns(trajectories)
        rewards = [t.reward for t in trajectories if t.reward is not None]
        top = max(turns, default=1)
        turns_axes.hist(
            turns, bins=range(0, top + 2), histtype="step", linewidth=1.5, label=_short(model)
        )
        reward_axes.hist(rewards, bins=20, histtype="step", linewidth=1.5, label=_short(model))
    turns_axes.set_xlabel("turns per episode")
    turns_axes.set_ylabel("episodes")
    reward_axes.set_xlabel("episode reward")
    for axes in (turns_axes, reward_axes):
        axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def plot_comparison(summaries: dict[str, dict[str, Any]], path: Path) -> None:
    metrics = [
        "success_rate",
        "success_rate_all",
        *(k for k in at_k_keys(list(summaries.values())) if k.startswith("pass@")),
    ]
    figure, axes = plt.subplots(figsize=(max(5, 1.2 * len(summaries) * len(metrics) / 2 + 3), 3.5))
    width = 0.8 / len(metrics)
    models = list(summaries)
    for index, metric in enumerate(metrics):
        positions = [i + index * width for i in range(len(models))]
        values = [summaries[m].get(metric) for m in models]
        heights = [nan if v is None else v for v in values]  # no bar, rather than a false 0
        axes.bar(positions, heights, width, label=LABELS.get(metric, metric))
    axes.set_xticks([i + width * (len(metrics) - 1) / 2 for i in range(len(models))])
    axes.set_xticklabels([_short(m) for m in models], rotation=15, ha="right", fontsize=8)
    axes.set_ylim(0, 1.05)
    axes.legend(fontsize=8)
    axes.set_title("models compared on the same tasks and seeds")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


ERRORS_LISTED = 20
"""Failed episodes listed by name in the report, per model (all of them are in episodes.jsonl)."""


def _error_block(
    summaries: dict[str, dict[str, Any]], episodes: dict[str, list[Trajectory]]
) -> list[str]:
    """A bold warning above the results, so lost episodes are the first thing read, with
    each failed episode's task and error."""
    lines = env_error_lines(summaries)
    if not lines:
        return []
    block = ["**Errors**", "", *(f"- {line}" for line in lines)]
    for model, trajectories in episodes.items():
        failed = [t for t in trajectories if t.errored]
        for t in failed[:ERRORS_LISTED]:
            block.append(
                f"- {_short(model)}: task {t.task_id} sample {t.sample}: {t.finish_reason}: "
                f"{t.error}"
            )
        if len(failed) > ERRORS_LISTED:
            block.append(f"- {_short(model)}: … {len(failed) - ERRORS_LISTED} more")
    return [*block, ""]


def _short(model: str) -> str:
    return model if len(model) <= 32 else "…" + model[-31:]


def write_report(
    out: Path, results: Sequence[Any], config: Any, command: str, breakdown_key: str | None
) -> Path:
    """Write report.md (and PNG plots) for the evaluated models; returns its path."""
    summaries = {r.model: r.summary for r in results}
    episodes = {r.model: list(read_jsonl(r.episodes_path)) for r in results}
    any_summary = next(iter(summaries.values()))
    lines = [
        f"# Evaluation: {config.env} ({config.split})",
        "",
        f"Command: `{command}`",
        "",
        f"{any_summary['tasks']} tasks × {config.n} samples × {len(config.seeds)} seeds "
        f"(seeds {', '.join(map(str, config.seeds))}); temperature {config.temperature}, "
        f"top-p {config.top_p}; max turns {config.rollout.max_turns or 'env default'}, "
        f"{config.rollout.max_new_tokens} new tokens per turn; "
        f"format {config.rollout.action_format}; prompts {config.rollout.prompt_style}.",
        "",
        "## Results",
        "",
        *_error_block(summaries, episodes),
        metrics_table(summaries),
        "",
        f"{RATES_NOTE} {INTERVAL_NOTE} pass@k: unbiased estimator over the scored samples "
        "of each task, averaged over the tasks with at least k of them; avg@n: mean success "
        "of the n samples per task, over the tasks with all n scored. A cell says over how "
        "many tasks when environment errors left some with fewer.",
        "",
    ]
    differences = differences_to_first(episodes)
    if differences:
        first = next(iter(summaries))
        lines += [
            f"## Differences to {first}",
            "",
            differences_table(differences),
            "",
            DIFFERENCE_NOTE,
            "",
        ]
    if breakdown_key and breakdown_table(summaries, breakdown_key):
        lines += [
            f"## Success by {breakdown_key}",
            "",
            breakdown_table(summaries, breakdown_key),
            "",
        ]
        if plot_breakdown(summaries, breakdown_key, out / f"success_by_{breakdown_key}.png"):
            lines += [f"![success by {breakdown_key}](success_by_{breakdown_key}.png)", ""]
    lines += ["## How episodes ended", "", finish_table(summaries), ""]
    plot_distributions(episodes, out / "distributions.png")
    lines += ["![turns and rewards](distributions.png)", ""]
    if len(summaries) > 1:
        plot_comparison(summaries, out / "comparison.png")
        lines += ["## Comparison", "", "![comparison](comparison.png)", ""]
    lines += ["## Episodes", ""]
    for result in results:
        relative = result.episodes_path.relative_to(out)
        lines.append(
            f"- {result.model}: `{relative}` — read one with "
            f"`agenttrain show {result.episodes_path} --index 0`"
        )
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
