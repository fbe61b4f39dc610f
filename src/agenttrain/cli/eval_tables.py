"""The tables `agenttrain eval` prints: the headline metrics, and success with its intervals."""

from __future__ import annotations

from rich import box
from rich.table import Table

SUMMARY_TITLES = {
    "success_rate": "scored",
    "success_rate_all": "all",
    "mean_turns": "turns",
    "format_error_rate": "fmt err",
    "errors": "err e+a",
    "tokens_per_s": "tok/s",
}
"""Short column titles, so an 80-column terminal shows every one whole; the caption says
what they count."""
SUMMARY_NOTE = (
    "success rate, scored: over episodes without an environment or agent error; all: over "
    "every episode, each error a failure; '-': no episode to count. fmt err: share of turns "
    "with a format error; err e+a: episodes lost to environment errors + to the agent's side "
    "raising (a solver, a parser, the policy), each listed in the report."
)
INTERVAL_NOTE = "[low, high]: 95% bootstrap interval over tasks."
DIFFERENCE_NOTE = (
    "Δ vs first: minus the first model over the tasks both played, with a paired interval "
    "(the same tasks drawn for both); * it excludes 0."
)


def summary_table(results: list) -> Table:
    """The headline metrics of each model, in columns narrow enough for 80 columns."""
    from agenttrain.eval.report import at_k_keys, metric_cell

    passes = [k for k in at_k_keys([r.summary for r in results]) if k.startswith("pass@")]
    keys = [
        "success_rate",
        "success_rate_all",
        *dict.fromkeys(passes[:1] + passes[-1:]),  # pass@1 and the largest k; all in report.md
        "mean_turns",
        "format_error_rate",
        "errors",
        "tokens_per_s",
    ]
    table = _table("evaluation")
    for key in keys:
        title = SUMMARY_TITLES.get(key, key)
        table.add_column(title, justify="right", min_width=len(title), no_wrap=True)
    for result in results:
        s = result.summary
        cells = [
            f"{s.get('env_errors', 0)}+{s.get('agent_errors', 0)}"
            if key == "errors"
            else metric_cell(s, key, False)
            for key in keys
        ]
        table.add_row(result.model, *cells)
    return table


def intervals_table(results: list) -> Table:
    """Success with its interval, and each later model's paired difference to the first: a
    table of its own, so the headline table keeps to 80 columns."""
    from agenttrain.eval.report import difference_cell, metric_cell

    table = _table("success (scored), 95% intervals")
    table.add_column("success", justify="right", no_wrap=True)
    if len(results) > 1:
        table.add_column("tasks", justify="right", no_wrap=True)
        table.add_column("Δ vs first", justify="right", no_wrap=True)
    for result in results:
        row = [result.model, metric_cell(result.summary, "success_rate")]
        if len(results) > 1:
            difference = result.summary.get("difference_to_first", {}).get("success_rate")
            row += [str(difference["tasks"]) if difference else "-", difference_cell(difference)]
        table.add_row(*row)
    return table


def _table(title: str) -> Table:
    """A compact table whose first column, the model, folds rather than truncates."""
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    table.add_column("model", overflow="fold", min_width=12)
    return table
