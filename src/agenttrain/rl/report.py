"""A training run's `report.md` and plots, made from its metrics.jsonl."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import cycle
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from agenttrain.rl.step_metrics import STRATUM_PREFIX
from agenttrain.run import checkpoint
from agenttrain.run.tracking import read_metrics

PANELS = (
    (
        "reward and success",
        (
            "critic/score/mean",
            "env/success_rate",
            "val/success_rate",
            "env/success_rate_from_scratch",
        ),
    ),
    ("KL", ("actor/kl_loss", "actor/ppo_kl", "actor/reward_kl_penalty")),
    ("entropy", ("actor/entropy",)),
    ("response length (tokens)", ("response_length/mean",)),
    ("turns per episode", ("num_turns/mean", "rollout/oracle_turns")),
    ("losses", ("actor/pg_loss", "actor/loss", "actor/demo_nll")),
    ("gradient norm", ("actor/grad_norm",)),
)
LINE_STYLES = (
    {"linestyle": "-", "marker": "o", "linewidth": 3.0, "alpha": 0.6},
    {"linestyle": "--", "marker": "s", "linewidth": 1.5},
    {"linestyle": ":", "marker": "^", "linewidth": 1.5},
)
"""One per line of a panel: the first wide and pale under dashed and dotted ones, so lines
with equal values (score and success of 0/1 rewards) stay visible."""
HEADLINE = (
    "critic/score/mean",
    "env/success_rate",
    "env/success_rate_from_scratch",
    "val/success_rate",
    "rollout/informative_group_share",
    "actor/entropy",
    "actor/kl_loss",
    "response_length/mean",
    "num_turns/mean",
    "timing_s/step",
)


def _series(rows: list[dict[str, float]], key: str) -> tuple[list[float], list[float]]:
    points = [(row["step"], row[key]) for row in rows if key in row]
    return [p[0] for p in points], [p[1] for p in points]


ACTIONS_PANEL = "actions per episode"
CLASSES_PANEL = "informative groups by class"
COLUMNS = 4


def shown_panels(rows: list[dict[str, float]]) -> list[tuple[str, tuple[str, ...]]]:
    """The panels with something to show: a panel whose metrics are all absent or zero (KL
    when no KL term is used) is left out rather than drawn flat. Where the environment
    declares action verbs, their counts per episode get a panel after the reward's, so a
    policy that stops crafting shows at a glance; where it names difficulty classes, the
    informative groups of each class get one, so a signal that comes from easy goals only
    shows too."""
    verbs = tuple(
        sorted({key for row in rows for key in row if key.startswith("rollout/actions/")})
    )
    classes = tuple(
        f"{STRATUM_PREFIX}{label}/informative_groups"
        for label in logged_classes(rows, "informative_groups")
    )
    candidates = [PANELS[0], (ACTIONS_PANEL, verbs), (CLASSES_PANEL, classes), *PANELS[1:]]
    return [
        (title, keys)
        for title, keys in candidates
        if any(row.get(key) for row in rows for key in keys)
    ]


def training_figure(rows: list[dict[str, float]]) -> Figure:
    panels = shown_panels(rows)
    grid_rows = max(2, -(-(len(panels) + 1) // COLUMNS))  # + 1: the timing panel
    figure, axes = plt.subplots(grid_rows, COLUMNS, figsize=(18, 3.5 * grid_rows))
    flat = axes.flatten()
    for axis, (title, keys) in zip(flat, panels, strict=False):
        for key, style in zip(keys, cycle(LINE_STYLES), strict=False):
            steps, values = _series(rows, key)
            if steps:
                axis.plot(steps, values, markersize=3, label=key, **style)
        axis.set_title(title)
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize=7)
    timing_axis = flat[len(panels)]
    timing_keys = sorted(
        {k for row in rows for k in row if k.startswith("timing_s/") and k != "timing_s/step"}
    )
    steps = [row["step"] for row in rows if "timing_s/step" in row]
    bottom = [0.0] * len(steps)
    for key in timing_keys:
        values = [row.get(key, 0.0) for row in rows if "timing_s/step" in row]
        timing_axis.bar(steps, values, bottom=bottom, label=key.removeprefix("timing_s/"))
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    timing_axis.set_title("time per step (s)")
    if timing_keys:
        timing_axis.legend(fontsize=7)
    for axis in flat[: len(panels) + 1]:
        axis.set_xlabel("step")
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    for axis in flat[len(panels) + 1 :]:
        axis.axis("off")
    figure.tight_layout()
    return figure


def plot_training(rows: list[dict[str, float]], path: Path) -> None:
    figure = training_figure(rows)
    figure.savefig(path, dpi=100)
    plt.close(figure)


def env_error_lines(rows: list[dict[str, float]]) -> list[str]:
    """A warning above everything else when training episodes were lost to environment
    errors: those episodes were not trained on, so the numbers below rest on fewer."""
    played_steps = [row for row in rows if row.get("rollout/episodes")]
    steps = [row for row in played_steps if row.get("rollout/env_error_episodes")]
    if not steps:
        return []
    lost = sum(row["rollout/env_error_episodes"] for row in steps)
    played = sum(row["rollout/episodes"] for row in played_steps)
    worst = max(steps, key=lambda row: row["rollout/env_error_episodes"] / row["rollout/episodes"])
    return [
        f"**Environment errors**: {lost:.0f} of {played:.0f} training episodes "
        f"({lost / max(played, 1):.1%}) ended in an environment error and were not trained on, "
        f"in {len(steps)} of {len(played_steps)} steps; worst: step {worst['step']:.0f}, "
        f"{worst['rollout/env_error_episodes']:.0f} of {worst['rollout/episodes']:.0f}.",
        "",
    ]


STEP_COLUMNS = (
    ("generation rounds", "train/num_gen_batches", "{:.0f}"),
    ("groups played", "rollout/played_groups", "{:.0f}"),
    ("informative groups", "rollout/informative_groups", "{:.0f}"),
    ("informative share", "rollout/informative_group_share", "{:.2f}"),
    ("share with success and failure", "rollout/success_mixed_group_share", "{:.2f}"),
    ("episodes trained on", "rollout/trained_episodes", "{:.0f}"),
    ("picks never played before", "sampling/unseen_share", "{:.2f}"),
    ("picks replayed", "sampling/replay_share", "{:.2f}"),
    ("re-screening success", "screen/success", "{:.2f}"),
    ("tasks kept after re-screening", "screen/kept_tasks", "{:.0f}"),
    ("shaped: equal and solved", "actor/zero_variance_solved_share", "{:.2f}"),
    ("shaped: equal and failed", "actor/zero_variance_failed_share", "{:.2f}"),
    ("training success", "env/success_rate", "{:.2f}"),
    ("replies cut off", "env/cut_off_rate", "{:.2f}"),
    ("progress of unsolved", "reward/progress", "{:.2f}"),
    ("entropy", "actor/entropy", "{:.3f}"),
    ("demonstrations' NLL", "actor/demo_nll", "{:.3f}"),
)
"""A GRPO run step by step: where its learning signal came from."""
SHOWN_WHEN_NONZERO = {"env/cut_off_rate"}
"""Columns that say something only where some step is not 0."""


def step_table(rows: Sequence[dict[str, float]]) -> list[str]:
    """Markdown: one row per step that played, one column per metric the run logged, then
    per difficulty class its groups as "informative / with a success / played"."""
    rows = [row for row in rows if "rollout/episodes" in row]
    if not rows:
        return []
    columns = [(title, key, number) for title, key, number in STEP_COLUMNS if _logged(rows, key)]
    strata = logged_classes(rows, "groups")
    titles = ["step", *(title for title, _, _ in columns)]
    titles += [f"{label.replace('_', ' ')}: informative / solved / groups" for label in strata]
    lines = ["| " + " | ".join(titles) + " |", "|---" * len(titles) + "|"]
    for row in rows:
        cells = [f"{row['step']:.0f}"]
        cells += [number.format(row[key]) if key in row else "–" for _, key, number in columns]
        cells += [_stratum_cell(row, label) for label in strata]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def logged_classes(rows: Sequence[dict[str, float]], count: str) -> list[str]:
    """The difficulty classes (`depth_2`) with a `rollout/stratum/<class>/<count>` metric in
    some row, depth_2 before depth_10."""
    suffix = f"/{count}"
    found = {
        key.removeprefix(STRATUM_PREFIX).removesuffix(suffix)
        for row in rows
        for key in row
        if key.startswith(STRATUM_PREFIX) and key.endswith(suffix)
    }
    return sorted(found, key=lambda label: (len(label), label))


def _logged(rows: Sequence[dict[str, float]], key: str) -> bool:
    if key in SHOWN_WHEN_NONZERO:
        return any(row.get(key) for row in rows)
    return any(key in row for row in rows)


def _stratum_cell(row: dict[str, float], label: str) -> str:
    prefix = f"{STRATUM_PREFIX}{label}/"
    if prefix + "groups" not in row:
        return "–"
    counts = (row.get(prefix + name, 0) for name in ("informative_groups", "solved_groups"))
    return " / ".join(f"{count:.0f}" for count in (*counts, row[prefix + "groups"]))


def write_training_report(run_dir: Path, config: object) -> Path:
    rows = read_metrics(run_dir / "metrics.jsonl")
    path = run_dir / "report.md"
    lines = [f"# Training run: {run_dir.name}", ""]
    environments = config.environments  # type: ignore[attr-defined]
    where = ", ".join(
        f"{env.name} ({env.split}{f', weight {env.weight}' if len(environments) > 1 else ''})"
        for env in environments
    )
    lines += [
        f"Environment {where}; model {config.model.path} "  # type: ignore[attr-defined]
        f"({'LoRA' if config.model.lora.enabled else 'full fine-tuning'}); "  # type: ignore[attr-defined]
        f"{config.algorithm.adv_estimator}; {config.data.batch_tasks} tasks × "  # type: ignore[attr-defined]
        f"{config.data.group_size} episodes per step.",
        "",
    ]  # type: ignore[attr-defined]
    lines += env_error_lines(rows)
    if rows:
        first, last = rows[0], rows[-1]
        lines += ["| metric | first | last |", "|---|---|---|"]
        for key in HEADLINE:
            start = next((r[key] for r in rows if key in r), None)
            end = next((r[key] for r in reversed(rows) if key in r), None)
            if start is not None:
                lines.append(f"| {key} | {start:.4g} | {end:.4g} |")
        lines += ["", f"Steps logged: {int(first['step'])}–{int(last['step'])}.", ""]
        plot_training(rows, run_dir / "training.png")
        lines += ["![training curves](training.png)", ""]
        table = step_table(rows)
        if table:
            lines += ["## Steps", "", *table, ""]
    newest = checkpoint.latest(run_dir)
    if newest is not None:
        lines += [
            "## Checkpoint",
            "",
            f"`{newest}`",
            "",
            *(
                f"- evaluate: `agenttrain eval --env {env.name} --model {run_dir}`"
                for env in environments
            ),
            f"- export: `agenttrain export {run_dir} --out {run_dir}/export --merge-lora`",
            f"- resume: `agenttrain train {run_dir}/config.yaml trainer.resume=auto`",
            "",
        ]
    lines += [
        "Metrics per step: `metrics.jsonl` (verl's names); sampled episodes: `trajectories/`; "
        "TensorBoard: `tensorboard --logdir " + str(run_dir / "tensorboard") + "`."
    ]
    path.write_text("\n".join(lines) + "\n")
    return path
