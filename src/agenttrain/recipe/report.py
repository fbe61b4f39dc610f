"""The recipe's report: report.md (stage table, paired gains, plot, the GRPO stage step by
step, the RFT baseline, wall times) and results.json, written once every stage has run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agenttrain.eval.metrics import Difference
from agenttrain.eval.report import metrics_table
from agenttrain.recipe.config import RecipeConfig
from agenttrain.rl.report import step_table

if TYPE_CHECKING:
    from agenttrain.rl.config import TrainConfig
    from agenttrain.run.stages import StageTimes


class RecipeReport:
    """What `Recipe` writes at its end; reads the run folder the stages filled."""

    config: RecipeConfig
    out: Path
    rft_dir: Path
    demos_path: Path
    grpo_config: TrainConfig
    grpo_group_size: int
    timings: dict[str, float]
    stage_times: StageTimes
    peak_memory_gb: dict[str, float]

    def _grpo_rows(self) -> list[dict[str, float]]:
        """The GRPO stage's metrics, one row per step that played."""
        from agenttrain.run.tracking import read_metrics

        metrics = self.out / "grpo" / "metrics.jsonl"
        if not metrics.exists():
            return []
        return [r for r in read_metrics(metrics) if "rollout/episodes" in r]

    def grpo_steps(self) -> list[str]:
        """The GRPO stage's per-step signal (informative groups, episodes trained on)."""
        rows = self._grpo_rows()
        table = step_table(rows)
        if not table:
            return []
        trained = sum(row.get("rollout/trained_episodes", 0) for row in rows)
        empty = sum(not row.get("rollout/trained_episodes") for row in rows)
        return [
            "## GRPO steps",
            "",
            *table,
            "",
            f"{trained:.0f} episodes trained on in {len(rows)} steps; "
            f"{empty} step(s) without an update.",
            "",
        ]

    def rft_section(self) -> list[str]:
        """How the RFT baseline was made, with its sampling budget next to GRPO's."""
        counts_file = self.rft_dir / "sampling.json"
        if not self.config.rft.enabled or not counts_file.exists():
            return []
        counts = json.loads(counts_file.read_text())
        rft = self.config.rft
        played = sum(row["rollout/episodes"] for row in self._grpo_rows())
        trained = (
            "SFT continued from the SFT checkpoint on those episodes"
            if counts["kept"]
            else "with nothing solved there is nothing to fine-tune on: no RFT model"
        )
        tasks = "the tasks GRPO played" if rft.tasks is None else f"tasks {rft.tasks}"
        return [
            "## RFT baseline",
            "",
            f"The SFT model played {counts['episodes']} episodes of {self.config.demos.split} "
            f"{tasks} ({rft.n or self.grpo_group_size} per task, temperature "
            f"{rft.temperature}) and solved "
            f"{counts['kept']}; {trained} ([rft/sft/report.md](rft/sft/report.md)). "
            f"GRPO played {played:.0f} episodes.",
            "",
        ]

    def screening_section(self) -> list[str]:
        """What the SFT model solved on the tasks GRPO could draw, which frontier sampling
        counted before GRPO's first step."""
        summaries = sorted((self.out / "screen").glob("*/summary.json"))
        if not self.config.screen.enabled or not summaries:
            return []
        from agenttrain.envs import get_spec

        summary = json.loads(summaries[-1].read_text())
        key = get_spec(self.config.demos.env).breakdown_key
        groups = summary.get(f"by_{key}", {}) if key else {}
        by_group = "; ".join(
            f"{key} {name}: {percent(row['success_rate'])} of {row['episodes']}"
            for name, row in groups.items()
        )
        return [
            "## Screening",
            "",
            f"Before GRPO the SFT model played {summary['episodes']} episodes of "
            f"{summary['tasks']} {summary['split']} tasks ({summary['samples_per_task']} per "
            f"task) and solved {percent(summary['success_rate'])}"
            + (f" ({by_group})" if by_group else "")
            + "; GRPO sampled its tasks by frontier with those episodes counted before step 1 "
            "(`data.frontier.seed_from`)."
            + self._kept_tasks(summaries[-1].parent / "episodes.jsonl"),
            "",
        ]

    def _kept_tasks(self, episodes: Path) -> str:
        """The sentence on `screen.keep=mixed`'s filter: how many tasks GRPO could draw."""
        if self.config.screen.keep != "mixed":
            return ""
        from agenttrain.rl.task_stats import TaskStats, mixed_tasks
        from agenttrain.rollout.trajectory import read_jsonl

        stats = TaskStats()
        stats.record(read_jsonl(episodes))
        every = self.grpo_config.data.frontier.rescreen_every
        again = (
            f" Every {every} steps the policy screened its pool again and drew the tasks it "
            "then both solved and failed (`data.frontier.rescreen_every`; counts per "
            "re-screening in grpo/report.md)."
            if every
            else ""
        )
        return (
            f" It drew only the {len(mixed_tasks(stats))} of {len(stats)} tasks screening both "
            "solved and failed (`screen.keep=mixed`)." + again
        )

    def _stage_details(self) -> dict[str, str]:
        details = {
            "demos": f"`{self.demos_path}`",
            "SFT": "[sft/report.md](sft/report.md)",
            "screening": "`screen/`",
            "GRPO": "[grpo/report.md](grpo/report.md)",
            "RFT": "[rft/sft/report.md](rft/sft/report.md)",
            "eval": "[eval/report.md](eval/report.md)",
        }
        if self.config.sft.checkpoint is not None:
            details["SFT"] = f"from `{self.config.sft.checkpoint}` (sft.checkpoint)"
        if not self.config.screen.enabled:
            del details["screening"]
        if not self.config.rft.enabled:
            del details["RFT"]
        return details

    def write_report(
        self,
        models: dict[str, str],
        summaries: dict[str, dict[str, Any]],
        gains: dict[str, Difference | None],
    ) -> Path:
        from agenttrain.eval.report import plot_comparison

        settings = self.config.eval
        plot_comparison(summaries, self.out / "comparison.png")
        rates = (f"{label} {percent(row['success_rate'])}" for label, row in summaries.items())
        lines = [
            f"# Recipe: {self.config.run.name}",
            "",
            "Oracle demonstrations -> SFT -> "
            + ("screening -> " if self.config.screen.enabled else "")
            + f"GRPO on {self.config.demos.env}"
            + (" (and the RFT baseline)" if self.config.rft.enabled else "")
            + "; each stage's "
            f"model evaluated on the same {settings.split} tasks "
            f"({summaries['base']['tasks']} tasks × {settings.n} samples × seeds "
            f"{settings.seeds}, temperature {settings.temperature}"
            + (
                f"; the base model {settings.base_n} sample(s) per task"
                if settings.base_n and settings.base_n != settings.n
                else ""
            )
            + ").",
            "",
            metrics_table(summaries),
            "",
            f"Success: {' -> '.join(rates)}.",
            "",
            "Paired gain in success over the tasks both stages played (95% paired bootstrap "
            "interval over tasks; * the interval excludes 0; field by field in "
            "[compare/compare.md](compare/compare.md)):",
            "",
            *(f"- {name}: {gain_text(gain)}" for name, gain in gains.items()),
            "",
            "![comparison](comparison.png)",
            "",
            *self.screening_section(),
            *self.grpo_steps(),
            *self.rft_section(),
            "## Models",
            "",
            *(f"- {label}: `{model}`" for label, model in models.items()),
            "",
            "## Stages",
            "",
            "| stage | wall time, all runs (min) | this run (min) | peak memory so far (GB) "
            "| details |",
            "|---|---|---|---|---|",
            *(
                f"| {stage} | {self.stage_times.seconds.get(stage, 0) / 60:.1f} "
                f"| {self.timings.get(stage, 0) / 60:.1f} "
                f"| {self.peak_memory_gb.get(stage, 0):.1f} | {details} |"
                for stage, details in self._stage_details().items()
            ),
            "",
            f"In all {sum(self.stage_times.seconds.values()) / 60:.1f} min of stage wall time. "
            '"All runs" sums every run of the recipe in this folder (an interrupted or '
            "continued stage adds up); this run reuses finished stages (~0). Peak memory is "
            "the recipe process's largest resident set up to the end of the stage.",
        ]
        path = self.out / "report.md"
        path.write_text("\n".join(lines) + "\n")
        (self.out / "results.json").write_text(
            json.dumps(
                {
                    "models": models,
                    "summaries": summaries,
                    "paired_gains": {k: g and g.to_dict() for k, g in gains.items()},
                    "timings_s": self.timings,
                    "timings_all_runs_s": self.stage_times.seconds,
                    "peak_memory_gb": self.peak_memory_gb,
                },
                indent=2,
            )
        )
        return path


def percent(rate: float | None) -> str:
    """A success rate as a percentage; '-' when nothing was scored (never 0%)."""
    return "-" if rate is None else f"{rate:.1%}"


def gain_text(gain: Difference | None) -> str:
    if gain is None:
        return "no scored task in common"
    text = f"{gain.estimate:+.1%} [{gain.low:+.1%}, {gain.high:+.1%}] over {gain.tasks} tasks"
    return text + (" *" if gain.excludes_zero else "")
