"""An SFT run's `report.md`: loss curves, data, the final checkpoint and its evaluation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from agenttrain.eval.report import metrics_table
from agenttrain.run import checkpoint
from agenttrain.run.tracking import read_metrics

HEADLINE = ("train/loss", "eval/loss", "train/grad_norm", "train/lr", "perf/tokens_per_s")


def plot_losses(rows: list[dict[str, float]], path: Path) -> None:
    figure, (losses, rate) = plt.subplots(1, 2, figsize=(11, 3.5))
    for key in ("train/loss", "eval/loss"):
        points = [(row["step"], row[key]) for row in rows if key in row]
        if points:
            losses.plot(*zip(*points, strict=True), marker="o", markersize=3, label=key)
    losses.set_title("token-mean cross-entropy (assistant tokens)")
    losses.set_xlabel("step")
    losses.legend(fontsize=8)
    points = [(row["step"], row["train/lr"]) for row in rows if "train/lr" in row]
    if points:
        rate.plot(*zip(*points, strict=True))
    rate.set_title("learning rate")
    rate.set_xlabel("step")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def write_sft_report(
    run_dir: Path, config: Any, eval_summary: dict[str, Any] | None, stopped: str | None = None
) -> Path:
    """`stopped`: why the run ended before its last planned step (held-out loss), if it did."""
    rows = read_metrics(run_dir / "metrics.jsonl")
    lines = [
        f"# SFT run: {config.run.name} ({run_dir})",
        "",
        f"Data: {', '.join(map(str, config.data.train))} ({config.data.env}); model "
        f"{config.model.path} ({'LoRA' if config.model.lora.enabled else 'full fine-tuning'}); "
        f"{config.optim.epochs} epochs, {config.optim.batch_tokens} tokens per step, "
        f"{'packed' if config.optim.packing else 'padded'} micro-batches, lr {config.optim.lr}.",
        "",
    ]
    if stopped:
        lines += [f"**Stopped early**: {stopped}.", ""]
    if rows:
        lines += ["| metric | first | last |", "|---|---|---|"]
        for key in HEADLINE:
            values = [row[key] for row in rows if key in row]
            if values:
                lines.append(f"| {key} | {values[0]:.4g} | {values[-1]:.4g} |")
        plot_losses(rows, run_dir / "loss.png")
        lines += ["", "![loss curves](loss.png)", ""]
    if eval_summary is not None:
        lines += [
            f"## Held-out evaluation ({config.eval.split})",
            "",
            metrics_table({"final checkpoint": eval_summary}),
            "",
            "Episodes and plots: [eval/report.md](eval/report.md).",
            "",
        ]
    newest = checkpoint.latest(run_dir)
    if newest is not None:
        lines += [
            "## Checkpoint",
            "",
            f"`{newest}`",
            "",
            f"- continue with RL: `agenttrain train configs/textcraft_grpo.yaml "
            f"model.path={newest}`",
            f"- evaluate: `agenttrain eval --env {config.data.env} --model {newest}`",
            f"- resume: `agenttrain sft {run_dir}/config.yaml trainer.resume=auto`",
            "",
        ]
    lines.append("Metrics per step: `metrics.jsonl`; TensorBoard: `tensorboard/`.")
    path = run_dir / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
