"""JSON decisions of evaluated runs: how often the model wrote one, and how each numeric field
is distributed, for environments whose action is a JSON object (`{"work": 0.8, ...}`).

A turn's decision is its action when that parses as one JSON object; a turn the format
rejected (no action) counts as a decision when its whole reply is one JSON object, so a
decision rejected for its values (out of range) still shows in the distributions. Runs whose
actions are never JSON objects have no decisions view: `decision_view` returns None.

Distributions are compared with the two-sample Kolmogorov–Smirnov test against the first run,
its p-value from the asymptotic Kolmogorov distribution with Stephens' small-sample
correction (conservative where values repeat, e.g. decisions rounded to 0.01).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never a window
import matplotlib.pyplot as plt
import numpy as np

from agenttrain.rollout.trajectory import Trajectory, Turn

QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)
SIGNIFICANCE = 0.05
"""A field's distribution is flagged as different from the first run's below this p-value."""
FORMAT_FAILURE_REWARD = -1.0
"""The reward a format rule gives an unparseable or out-of-range decision."""


@dataclass(frozen=True)
class FieldStats:
    """One numeric field's values in one run."""

    count: int
    mean: float
    std: float
    """Sample standard deviation (ddof=1, as pandas' describe); nan below two values."""
    quantiles: dict[float, float]


@dataclass(frozen=True)
class KSTest:
    """Two-sample Kolmogorov–Smirnov test of a run's field against the first run's."""

    statistic: float
    p_value: float

    @property
    def differs(self) -> bool:
        return self.p_value < SIGNIFICANCE


@dataclass(frozen=True)
class RunDecisions:
    """What one run's turns decided, and its format failures."""

    label: str
    turns: int
    decisions: list[dict[str, Any]]
    minus_one_share: float
    """Share of scored episodes whose reward is the format rule's −1."""
    mean_reward: float

    @property
    def parse_rate(self) -> float:
        return len(self.decisions) / self.turns if self.turns else 0.0

    def values(self, field: str) -> np.ndarray:
        return np.array([d[field] for d in self.decisions if _is_number(d.get(field))], float)


@dataclass(frozen=True)
class DecisionView:
    runs: list[RunDecisions]
    fields: list[str]
    stats: dict[str, dict[str, FieldStats | None]]
    """field -> run label -> its stats (None: the run has no value of the field)."""
    tests: dict[str, dict[str, KSTest | None]]
    """field -> label of each run after the first -> its test against the first."""


def parse_object(text: str | None) -> dict[str, Any] | None:
    """`text` as one JSON object, or None (NaN and Infinity are not JSON numbers)."""
    if text is None:
        return None
    try:
        value = json.loads(text.strip(), parse_constant=_reject_constant)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def turn_decision(turn: Turn) -> dict[str, Any] | None:
    """The JSON object a turn decided: its action, else (format rejected) its whole reply."""
    if turn.action is not None:
        return parse_object(turn.action)
    return parse_object(turn.reply)


def has_json_actions(trajectories: Sequence[Trajectory]) -> bool:
    return any(parse_object(turn.action) is not None for t in trajectories for turn in t.turns)


def run_decisions(label: str, trajectories: Sequence[Trajectory]) -> RunDecisions:
    """Decisions over the episodes the environment did not fail (env errors have no score)."""
    episodes = [t for t in trajectories if not t.errored]
    turns = [turn for t in episodes for turn in t.turns]
    rewards = [t.reward for t in episodes if t.reward is not None]
    decisions = [d for d in map(turn_decision, turns) if d is not None]
    failures = sum(r == FORMAT_FAILURE_REWARD for r in rewards)
    return RunDecisions(
        label=label,
        turns=len(turns),
        decisions=decisions,
        minus_one_share=failures / len(rewards) if rewards else 0.0,
        mean_reward=float(np.mean(rewards)) if rewards else float("nan"),
    )


def numeric_fields(runs: Sequence[RunDecisions]) -> list[str]:
    """Every field with a number in some decision, in the order first seen."""
    seen: dict[str, None] = {}
    for run in runs:
        for decision in run.decisions:
            seen.update((k, None) for k, v in decision.items() if _is_number(v))
    return list(seen)


def field_stats(values: np.ndarray) -> FieldStats | None:
    if values.size == 0:
        return None
    std = float(np.std(values, ddof=1)) if values.size > 1 else float("nan")
    quantiles = dict(zip(QUANTILES, np.quantile(values, QUANTILES).tolist(), strict=True))
    return FieldStats(int(values.size), float(np.mean(values)), std, quantiles)


def ks_test(first: np.ndarray, other: np.ndarray) -> KSTest | None:
    """D = sup |F_first − F_other| over all values; p = Q_KS((√nₑ + 0.12 + 0.11/√nₑ)·D),
    nₑ = nm/(n+m). None when either sample is empty."""
    if first.size == 0 or other.size == 0:
        return None
    points = np.concatenate([first, other])
    below_first = np.searchsorted(np.sort(first), points, side="right") / first.size
    below_other = np.searchsorted(np.sort(other), points, side="right") / other.size
    statistic = float(np.max(np.abs(below_first - below_other)))
    effective = math.sqrt(first.size * other.size / (first.size + other.size))
    return KSTest(statistic, kolmogorov_q((effective + 0.12 + 0.11 / effective) * statistic))


def kolmogorov_q(lam: float) -> float:
    """P(K > λ) of the Kolmogorov distribution: 2 Σ_{j≥1} (−1)^{j−1} exp(−2 j² λ²)."""
    if lam < 0.2:  # the series is 1 to 15 digits here, and converges too slowly to sum
        return 1.0
    total = 0.0
    for j in range(1, 101):
        term = 2 * (-1) ** (j - 1) * math.exp(-2 * j * j * lam * lam)
        total += term
        if abs(term) < 1e-12:
            break
    return min(1.0, max(0.0, total))


def decision_view(
    runs: Sequence[tuple[str, Sequence[Trajectory]]], fields: Sequence[str] | None = None
) -> DecisionView | None:
    """The decisions of each (label, episodes) run, the first as baseline; None when no run's
    actions are JSON objects. `fields`: the schema's field list, else every numeric one seen."""
    if not any(has_json_actions(trajectories) for _, trajectories in runs):
        return None
    decided = [run_decisions(label, trajectories) for label, trajectories in runs]
    names = list(fields) if fields is not None else numeric_fields(decided)
    first = decided[0]
    stats = {f: {run.label: field_stats(run.values(f)) for run in decided} for f in names}
    tests = {
        f: {run.label: ks_test(first.values(f), run.values(f)) for run in decided[1:]}
        for f in names
    }
    return DecisionView(decided, names, stats, tests)


def plot_field(view: DecisionView, field: str, path: Path) -> None:
    """Histograms of one field, runs overlaid on shared bins, and a violin per run."""
    samples = [(run.label, run.values(field)) for run in view.runs]
    present = [(label, values) for label, values in samples if values.size]
    figure, (histogram, violins) = plt.subplots(1, 2, figsize=(10, 3.8))
    bins = np.histogram_bin_edges(np.concatenate([v for _, v in present]), bins=20)
    for label, values in present:
        histogram.hist(values, bins=bins, histtype="step", linewidth=1.6, label=_short(label))
    histogram.set_xlabel(field)
    histogram.set_ylabel("decisions")
    histogram.legend(fontsize=8)
    histogram.set_title(f"{field}: histogram", fontsize=9)
    violins.violinplot([v for _, v in present], showmedians=True)
    violins.set_xticks(range(1, len(present) + 1), [_short(label) for label, _ in present])
    violins.tick_params(axis="x", labelrotation=15, labelsize=8)
    violins.set_ylabel(field)
    violins.set_title(f"{field}: distribution per run (median marked)", fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def plot_name(index: int, field: str) -> str:
    """A file name for the plot of the view's `index`-th field (JSON keys may hold any
    character; the index keeps two keys that read alike apart)."""
    return f"field-{index + 1}-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", field)[:40] + ".png"


def _short(label: str) -> str:
    return label if len(label) <= 28 else "…" + label[-27:]
