"""`agenttrain recipe`: demonstrations -> SFT -> GRPO -> evaluation of each stage.

Every stage writes into one run folder and is skipped when it already finished, so an
interrupted recipe continues where it stopped. A finished stage is reused only with the
settings it ran with (`stages.json`, `run/stages.py`); other settings are refused, naming the
changed keys and the folders to remove. The base model, the SFT checkpoint and the
SFT+GRPO checkpoint are evaluated on the same held-out tasks and seeds; `report.md` holds
the comparison table and plot. With `rft.enabled`, the RFT baseline (SFT continued on the SFT
model's own solved episodes) is trained and evaluated beside them.

    <out>/demos.jsonl   <out>/sft/   <out>/grpo/   <out>/rft/   <out>/eval/   <out>/report.md
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, model_validator
from rich.console import Console

from agenttrain import config as config_io
from agenttrain.eval.metrics import Difference
from agenttrain.eval.report import metrics_table
from agenttrain.eval.runner import EvalConfig, parse_ranges
from agenttrain.rollout.engine import RolloutConfig
from agenttrain.run import checkpoint
from agenttrain.run.config import RunConfig, Section
from agenttrain.run.stages import StageChanged, StageRecords
from agenttrain.sft.demos import check_ingredients, check_quotes, check_recovery

if TYPE_CHECKING:
    from agenttrain.sft.config import SFTConfig


class DemosStage(Section):
    env: str = "textcraft"
    split: str = "train"
    tasks: list[int] | None = None
    solver: str = "oracle"
    action_format: Literal["react", "adapt", "json", "raw"] = "react"
    recovery: float = Field(0.0, ge=0.0, le=1.0)
    """Share of demonstrations rewritten with a refused craft and its recovery (TextCraft;
    `agenttrain demos --recovery`)."""
    recovery_style: Literal["plain", "inventory"] = "plain"
    """plain: the recovery gets the ingredient at once; inventory: it checks the inventory
    first and names what it lacks (`agenttrain demos --recovery-style`)."""
    recovery_from: Literal["craft", "get", "both"] = "craft"
    """The refused action: a craft before its ingredients, a `get` of an item that must be
    crafted, or either (`agenttrain demos --recovery-from`)."""
    quote_recipes: bool = False
    """Thoughts quote the listed recipe the first time they work toward an item (TextCraft;
    `agenttrain demos --quote-recipes`)."""
    quote_ingredients: bool = False
    """With `quote_recipes`: each quote is followed by which of its ingredients must be
    crafted first (`agenttrain demos --quote-ingredients`)."""

    @model_validator(mode="after")
    def _recovery_exists(self) -> DemosStage:
        if self.recovery:
            check_recovery(self.env, self.recovery_style, self.action_format, self.recovery_from)
        if self.quote_recipes:
            check_quotes(self.env, self.action_format)
        if self.quote_ingredients:
            check_ingredients(self.quote_recipes)
        return self


class TrainingStage(Section):
    config: Path
    overrides: list[str] = Field(default_factory=list)


class RecipeEval(Section):
    split: str = "test"
    tasks: list[int] | str | None = None
    """Positions within the split: a list, or ranges such as "0-39"."""
    n: int = Field(4, ge=1)
    base_n: int | None = Field(None, ge=1)
    """Samples per task for the base model (default: `n`). The base model fails on format
    from the first turns, and each such episode costs full-length replies: fewer samples keep
    the recipe within its hour without changing what the table says."""
    seeds: list[int] = Field(default_factory=lambda: [0])
    temperature: float = Field(0.7, ge=0)
    max_turns: int | None = Field(None, ge=1)
    max_new_tokens: int = Field(96, ge=1)
    concurrency: int = Field(32, ge=1)
    """Episodes played at once (`agenttrain eval --concurrency`). A GPU decodes 128 rows
    about as fast per step as 32, so the GPU recipe raises it."""


class RFTStage(Section):
    """Rejection-sampling fine-tuning, the simplest alternative GRPO has to beat: the SFT
    model plays training tasks, and SFT continues from its checkpoint on the episodes it
    solved. Off by default (it adds a sampling pass and a fourth evaluation)."""

    enabled: bool = False
    tasks: list[int] | str | None = None
    """Training-split positions to sample (a list, or ranges such as "0-63"); default: the
    tasks the GRPO stage played, so that both spend their samples on the same tasks."""
    n: int | None = Field(None, ge=1)
    """Samples per task; default: GRPO's group size."""
    temperature: float = Field(0.6, ge=0)
    max_turns: int | None = Field(10, ge=1)
    max_new_tokens: int = Field(96, ge=1)
    overrides: list[str] = Field(default_factory=list)
    """Overrides of the SFT config for the continued fine-tuning (e.g. optim.lr=5e-4)."""


class RecipeConfig(Section):
    run: RunConfig = Field(
        default_factory=lambda: RunConfig(
            name="textcraft-recipe", out_dir=Path("runs/textcraft-recipe")
        )
    )
    demos: DemosStage = Field(default_factory=DemosStage)
    sft: TrainingStage = Field(
        default_factory=lambda: TrainingStage(config=Path("configs/textcraft_sft.yaml"))
    )
    grpo: TrainingStage = Field(
        default_factory=lambda: TrainingStage(config=Path("configs/textcraft_grpo.yaml"))
    )
    rft: RFTStage = Field(default_factory=RFTStage)
    eval: RecipeEval = Field(default_factory=RecipeEval)


TRAINING_STAGES = ("sft", "grpo", "rft")
UPSTREAM = {"base": None, "SFT": "SFT", "SFT+GRPO": "GRPO", "SFT+RFT": "RFT"}
"""The stage whose record an evaluated model's settings nest."""


def load_recipe(path: Path, overrides: Sequence[str] = ()) -> RecipeConfig:
    """The recipe with command-line overrides. A stage's override list given on the command
    line is composed with the recipe file's, key by key (last wins), not swapped for it:
    `'grpo.overrides=[trainer.total_steps=16]'` keeps the recipe's temperature, group size and
    the rest. (To undo a recipe's key, override it with the value you want.)"""
    config = config_io.load(RecipeConfig, path, overrides)
    given = {s for s in TRAINING_STAGES if any(o.startswith(f"{s}.overrides=") for o in overrides)}
    if not given:
        return config
    others = [o for o in overrides if not o.startswith(tuple(f"{s}.overrides=" for s in given))]
    base = config_io.load(RecipeConfig, path, others)
    updates = {}
    for stage in given:
        mine = getattr(config, stage)
        merged = compose_overrides(getattr(base, stage).overrides, mine.overrides)
        updates[stage] = mine.model_copy(update={"overrides": merged})
    return config.model_copy(update=updates)


def compose_overrides(base: Sequence[str], given: Sequence[str]) -> list[str]:
    """`base` then `given`, one entry per dotted key, the last one winning."""
    merged: dict[str, str] = {}
    for item in [*base, *given]:
        key = item.split("=", 1)[0].strip()
        merged.pop(key, None)
        merged[key] = item
    return list(merged.values())


class Recipe:
    def __init__(self, config: RecipeConfig, console: Console | None = None) -> None:
        from agenttrain.rl.config import TrainConfig

        self.config = config
        self.console = console or Console()
        self.out = config.run.out_dir
        seed = f"run.seed={config.run.seed}"
        self.demos_path = self.out / "demos.jsonl"
        # both configs are read (and checked) before anything runs
        self.sft_config = self._sft_stage_config(self.out / "sft", self.demos_path)
        self.grpo_overrides = [
            *config.grpo.overrides,
            seed,
            f"run.out_dir={self.out / 'grpo'}",
            f"env.name={config.demos.env}",
            f"rollout.action_format={config.demos.action_format}",
        ]
        grpo = config_io.load(TrainConfig, config.grpo.config, self.grpo_overrides)
        self.grpo_group_size = grpo.data.group_size
        self.rft_dir = self.out / "rft"
        self.rft_config = self._sft_stage_config(
            self.rft_dir / "sft", self.rft_dir / "own.jsonl", config.rft.overrides
        )
        self.timings: dict[str, float] = {}
        self.records = StageRecords(self.out)

    def _sft_stage_config(self, out_dir: Path, data: Path, extra: Sequence[str] = ()) -> SFTConfig:
        """The recipe's SFT config for one stage (SFT, or RFT's continued SFT): the stage's
        overrides, then the recipe's seed, folder, data and environment."""
        from agenttrain.sft.config import SFTConfig  # imported here: keeps the CLI start light

        config = self.config
        return config_io.load(
            SFTConfig,
            config.sft.config,
            [
                *config.sft.overrides,
                *extra,
                f"run.seed={config.run.seed}",
                f"run.out_dir={out_dir}",
                f"data.train=[{data}]",
                f"data.env={config.demos.env}",
                f"eval.action_format={config.demos.action_format}",
            ],
        )

    def run(self) -> Path:
        self.out.mkdir(parents=True, exist_ok=True)
        resolved = self.out / "recipe.yaml"
        previous = resolved.read_text() if resolved.exists() else None
        resolved.write_text(config_io.dump(self.config))
        try:
            return self._run_stages()
        except StageChanged:
            # refused: the folder's record stays the settings its stages ran with
            if previous is None:
                resolved.unlink()
            else:
                resolved.write_text(previous)
            raise

    def _run_stages(self) -> Path:
        self._stage("demos", self.make_demos)
        sft_checkpoint = self._stage("SFT", self.train_sft)
        grpo_checkpoint = self._stage("GRPO", lambda: self.train_grpo(sft_checkpoint))
        models = {"base": self.sft_config.model.path, "SFT": sft_checkpoint}
        if self.config.rft.enabled:
            rft_checkpoint = self._stage("RFT", lambda: self.train_rft(sft_checkpoint))
            if rft_checkpoint is not None:
                models["SFT+RFT"] = rft_checkpoint
        models["SFT+GRPO"] = grpo_checkpoint
        summaries = self._stage("eval", lambda: self.evaluate(models))
        gains = self.compare_stages(models)
        return self.write_report(models, summaries, gains)

    def _stage(self, name: str, work: Any) -> Any:
        self.console.rule(f"[bold]{name}")
        started = time.perf_counter()
        result = work()
        self.timings[name] = time.perf_counter() - started
        return result

    def make_demos(self) -> Path:
        from agenttrain.sft.demos import add_quotes, add_recovery, write_demos

        settings = self.stage_settings("demos")
        if self.demos_path.exists():
            self._reuse("demos", settings, self.demos_path, "sft", "grpo", "rft", "eval")
            self.console.print(f"using the demonstrations in {self.demos_path}")
            return self.demos_path
        demos = self.config.demos
        solver_config = EvalConfig(
            env=demos.env,
            split=demos.split,
            tasks=demos.tasks,
            models=[demos.solver],
            seeds=[self.config.run.seed],
            rollout=RolloutConfig(action_format=demos.action_format),
        )
        staging = self.demos_path.with_suffix(".partial")
        result = write_demos(solver_config, staging, self.console)
        recovered = add_recovery(
            staging,
            demos.env,
            demos.recovery,
            self.config.run.seed,
            demos.recovery_style,
            demos.recovery_from,
        )
        if demos.quote_recipes:
            add_quotes(staging, demos.env, demos.action_format, demos.quote_ingredients)
        staging.rename(self.demos_path)
        self.records.record("demos", settings)
        self.console.print(f"kept {result.kept} of {result.episodes} episodes")
        if demos.recovery:
            from agenttrain.envs.textcraft.recovery import REFUSED

            what = REFUSED[demos.recovery_from]
            self.console.print(f"{recovered} rewritten to recover from {what}")
        return self.demos_path

    def train_sft(self) -> str:
        from agenttrain.sft.trainer import SFTTrainer

        settings = self.stage_settings("SFT")
        done = checkpoint.finished(self.sft_config.run.out_dir)
        if done is None:
            SFTTrainer(self.sft_config, self.console).train()
            done = checkpoint.finished(self.sft_config.run.out_dir)
            if done is None:
                raise KeyboardInterrupt  # stopped by Ctrl-C; the checkpoint is kept
            self.records.record("SFT", settings)
        else:
            self._reuse("SFT", settings, self.out / "sft", "grpo", "rft", "eval")
            self.console.print(f"SFT already finished: {done['checkpoint']}")
        return str(done["checkpoint"])

    def train_grpo(self, start: str) -> str:
        from agenttrain.rl.config import TrainConfig
        from agenttrain.rl.trainer import Trainer

        config = config_io.load(
            TrainConfig, self.config.grpo.config, [*self.grpo_overrides, f"model.path={start}"]
        )
        settings = self.stage_settings("GRPO", config.model_dump(mode="json"))
        done = checkpoint.finished(config.run.out_dir)
        if done is None:
            trainer = Trainer(config, self.console)
            trainer.train()
            done = checkpoint.finished(config.run.out_dir)
            if done is None:
                raise KeyboardInterrupt
            self.records.record("GRPO", settings)
        else:
            self._reuse("GRPO", settings, self.out / "grpo", "eval")
            self.console.print(f"GRPO already finished: {done['checkpoint']}")
        return str(done["checkpoint"])

    def train_rft(self, start: str) -> str | None:
        """The RFT baseline's checkpoint: SFT continued from `start` on the episodes the SFT
        model solved; None when it solved none (there is nothing to fine-tune on)."""
        from agenttrain.sft.trainer import SFTTrainer

        sampled = self.sample_own_successes(start)
        if not sampled["kept"]:
            self.console.print(
                f"[yellow]RFT: the SFT model solved none of {sampled['episodes']} episodes; "
                "nothing to fine-tune on, no RFT model[/]"
            )
            return None
        model = self.rft_config.model.model_copy(update={"path": start})
        config = self.rft_config.model_copy(update={"model": model})
        settings = self.stage_settings("RFT", config.model_dump(mode="json"))
        done = checkpoint.finished(config.run.out_dir)
        if done is None:
            SFTTrainer(config, self.console).train()
            done = checkpoint.finished(config.run.out_dir)
            if done is None:
                raise KeyboardInterrupt
            self.records.record("RFT", settings)
        else:
            self._reuse("RFT", settings, config.run.out_dir, "eval")
            self.console.print(f"RFT already finished: {done['checkpoint']}")
        return str(done["checkpoint"])

    def sample_own_successes(self, model: str) -> dict[str, int]:
        """`model` on the RFT tasks; its solved episodes go to <out>/rft/own.jsonl.
        Returns {"episodes": played, "kept": solved} (also kept in rft/sampling.json)."""
        from agenttrain.sft.demos import write_demos

        rft = self.config.rft
        sampler = EvalConfig(
            env=self.config.demos.env,
            split=self.config.demos.split,
            tasks=self.rft_tasks(),
            models=[model],
            n=rft.n or self.grpo_group_size,
            seeds=[self.config.run.seed],
            temperature=rft.temperature,
            rollout=RolloutConfig(
                max_turns=rft.max_turns,
                max_new_tokens=rft.max_new_tokens,
                action_format=self.config.demos.action_format,
            ),
            device=self.sft_config.model.device,
        )
        own = self.rft_dir / "own.jsonl"
        counts_file = self.rft_dir / "sampling.json"
        own_settings = sampler.model_dump(mode="json", exclude={"out"})
        settings = self.stage_settings("RFT samples", own_settings)
        if own.exists() and counts_file.exists():
            self._reuse("RFT samples", settings, own, "rft/sft", "eval")
            self.console.print(f"using the RFT samples in {own}")
            return json.loads(counts_file.read_text())
        self.rft_dir.mkdir(parents=True, exist_ok=True)
        staging = own.with_suffix(".partial")
        result = write_demos(sampler, staging, self.console)
        staging.rename(own)
        counts = {"episodes": result.episodes, "kept": result.kept}
        counts_file.write_text(json.dumps(counts))
        self.records.record("RFT samples", settings)
        self.console.print(f"RFT: the SFT model solved {result.kept} of {result.episodes}")
        return counts

    def rft_tasks(self) -> list[int]:
        """Split positions RFT samples: `rft.tasks`, else the tasks the GRPO stage played."""
        from agenttrain.eval.runner import select_tasks
        from agenttrain.rollout.trajectory import read_jsonl

        tasks = self.config.rft.tasks
        if tasks is not None:
            return parse_ranges(tasks) if isinstance(tasks, str) else tasks
        folder = self.out / "grpo" / "trajectories"
        played = {e.task_id for path in sorted(folder.glob("*.jsonl")) for e in read_jsonl(path)}
        if not played:
            raise ValueError(
                f"rft.tasks is unset and the GRPO stage kept no trajectories in {folder} to "
                "take its tasks from; set rft.tasks (e.g. rft.tasks=0-63)"
            )
        split = self.config.demos.split
        ids = select_tasks(self.config.demos.env, split, None)
        missing = played - set(ids)
        if missing:
            raise ValueError(
                f"GRPO played tasks outside the {split} split ({sorted(missing)[:5]}); "
                "set rft.tasks"
            )
        return [position for position, task in enumerate(ids) if task in played]

    def stage_settings(self, stage: str, own: dict[str, Any] | None = None) -> dict[str, Any]:
        """What a stage's result depends on: its own resolved settings and, nested, those of
        the stage it starts from (as recorded when that stage finished)."""
        if stage == "demos":
            demos = self.config.demos.model_dump(mode="json")
            recorded = (self.records.get("demos") or {}).get("demos", {})
            defaults = (
                ("recovery", 0.0),
                ("recovery_style", "plain"),
                ("recovery_from", "craft"),
                ("quote_recipes", False),
                ("quote_ingredients", False),
            )
            for key, default in defaults:
                if demos[key] == default and recorded.get(key, default) == default:
                    del demos[key]  # runs recorded before the setting existed still match
            return {"demos": demos, "seed": self.config.run.seed}
        if stage == "SFT":
            own = self.sft_config.model_dump(mode="json")
            return {"sft": own, "demos": self.records.get("demos") or self.stage_settings("demos")}
        if stage == "GRPO":
            return {"grpo": own, "sft": self.records.get("SFT") or self.stage_settings("SFT")}
        if stage == "RFT samples":
            return {"rft": own, "sft": self.records.get("SFT") or self.stage_settings("SFT")}
        if stage == "RFT":
            return {"rft": own, "samples": self.records.get("RFT samples")}
        upstream = UPSTREAM[stage]
        return {"eval": own, "model": self.records.get(upstream) if upstream else None}

    def _reuse(self, stage: str, settings: dict[str, Any], folder: Path, *later: str) -> None:
        """Refuse to reuse a finished stage that ran with other settings."""
        if not self.records.check(stage, settings, folder, [self.out / name for name in later]):
            self.console.print(
                f"[yellow]{folder} has no record of its settings (made before they were "
                "recorded): reused as it is[/]"
            )

    def eval_config(self, models: list[str]) -> EvalConfig:
        settings = self.config.eval
        tasks = parse_ranges(settings.tasks) if isinstance(settings.tasks, str) else settings.tasks
        return EvalConfig(
            env=self.config.demos.env,
            split=settings.split,
            tasks=tasks,
            models=models,
            n=settings.n,
            seeds=settings.seeds,
            temperature=settings.temperature,
            rollout=RolloutConfig(
                max_turns=settings.max_turns,
                max_new_tokens=settings.max_new_tokens,
                action_format=self.config.demos.action_format,
                max_in_flight=settings.concurrency,
            ),
            device=self.sft_config.model.device,
            out=self.out / "eval",
        )

    def evaluate(self, models: dict[str, str]) -> dict[str, dict[str, Any]]:
        """Each stage's model on the same tasks and seeds (a finished model is not redone)."""
        from agenttrain.envs import get_spec
        from agenttrain.eval.report import write_report
        from agenttrain.eval.runner import ModelResult, evaluate, slug

        config = self.eval_config(list(models.values()))
        results = []
        for label, model in models.items():
            folder = config.out / slug(model)
            samples = self.config.eval.base_n if label == "base" else None
            single = config.model_copy(update={"models": [model], "n": samples or config.n})
            own = single.model_dump(mode="json", exclude={"out"})
            settings = self.stage_settings(label, own)
            if (folder / "summary.json").exists():
                self._reuse(f"eval {label}", settings, folder)
                summary = json.loads((folder / "summary.json").read_text())
                results.append(ModelResult(model, summary, folder / "episodes.jsonl", 0.0))
                self.console.print(f"{label}: already evaluated ({folder})")
                continue
            results += evaluate(single, self.console)
            self.records.record(f"eval {label}", settings)
        (config.out / "summary.json").write_text(
            json.dumps({r.model: r.summary for r in results}, indent=2)
        )
        write_report(
            config.out,
            results,
            config,
            f"agenttrain recipe {self.out}/recipe.yaml",
            get_spec(config.env).breakdown_key,
        )
        return {label: results[i].summary for i, label in enumerate(models)}

    def compare_stages(self, models: dict[str, str]) -> dict[str, Difference | None]:
        """`agenttrain compare` of the stages' evaluations (base first) into <out>/compare/,
        and each stage's paired gain over the one before (GRPO's also over RFT when it ran):
        what a reader needs to judge whether SFT and then GRPO helped beyond noise."""
        from agenttrain.eval.compare import compare, difference, write_markdown
        from agenttrain.eval.runner import slug

        files = [self.out / "eval" / slug(model) / "episodes.jsonl" for model in models.values()]
        comparison = compare(files)
        write_markdown(
            comparison, self.out / "compare", "agenttrain compare " + " ".join(map(str, files))
        )
        runs = dict(zip(models, comparison.runs, strict=True))
        pairs = [("SFT", "base"), ("SFT+GRPO", "SFT")]
        if "SFT+RFT" in runs:  # the baseline's own gain, and GRPO's gain over it
            pairs += [("SFT+RFT", "SFT"), ("SFT+GRPO", "SFT+RFT")]
        return {
            f"{better} - {than}": difference(runs[than], runs[better], "success_rate")
            for better, than in pairs
        }

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
        table = grpo_step_table(rows)
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

    def _stage_details(self) -> dict[str, str]:
        details = {
            "demos": f"`{self.demos_path}`",
            "SFT": "[sft/report.md](sft/report.md)",
            "GRPO": "[grpo/report.md](grpo/report.md)",
            "RFT": "[rft/sft/report.md](rft/sft/report.md)",
            "eval": "[eval/report.md](eval/report.md)",
        }
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
        rates = (f"{label} {_percent(row['success_rate'])}" for label, row in summaries.items())
        lines = [
            f"# Recipe: {self.config.run.name}",
            "",
            f"Oracle demonstrations -> SFT -> GRPO on {self.config.demos.env}"
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
            *(f"- {name}: {_gain(gain)}" for name, gain in gains.items()),
            "",
            "![comparison](comparison.png)",
            "",
            *self.grpo_steps(),
            *self.rft_section(),
            "## Models",
            "",
            *(f"- {label}: `{model}`" for label, model in models.items()),
            "",
            "## Stages",
            "",
            "| stage | wall time (min) | details |",
            "|---|---|---|",
            *(
                f"| {stage} | {self.timings.get(stage, 0) / 60:.1f} | {details} |"
                for stage, details in self._stage_details().items()
            ),
            "",
            "Stages that had already finished are reused (wall time ~0).",
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
                },
                indent=2,
            )
        )
        return path


STEP_COLUMNS = (
    ("generation rounds", "train/num_gen_batches", "{:.0f}"),
    ("groups played", "rollout/played_groups", "{:.0f}"),
    ("informative groups", "rollout/informative_groups", "{:.0f}"),
    ("informative share", "rollout/informative_group_share", "{:.2f}"),
    ("share with success and failure", "rollout/success_mixed_group_share", "{:.2f}"),
    ("episodes trained on", "rollout/trained_episodes", "{:.0f}"),
    ("training success", "env/success_rate", "{:.2f}"),
    ("progress of unsolved", "reward/progress", "{:.2f}"),
    ("entropy", "actor/entropy", "{:.3f}"),
)
"""The GRPO stage step by step in the recipe's report: where its learning signal came from."""


def grpo_step_table(rows: Sequence[dict[str, float]]) -> list[str]:
    """Markdown rows: one column per GRPO step, one row per metric the run logged."""
    if not rows:
        return []
    steps = [int(row["step"]) for row in rows]
    lines = [
        "| GRPO step | " + " | ".join(map(str, steps)) + " |",
        "|---" * (len(steps) + 1) + "|",
    ]
    for title, key, number in STEP_COLUMNS:
        if not any(key in row for row in rows):
            continue
        cells = [number.format(row[key]) if key in row else "–" for row in rows]
        lines.append(f"| {title} | " + " | ".join(cells) + " |")
    return lines


def _percent(rate: float | None) -> str:
    """A success rate as a percentage; '-' when nothing was scored (never 0%)."""
    return "-" if rate is None else f"{rate:.1%}"


def _gain(gain: Difference | None) -> str:
    if gain is None:
        return "no scored task in common"
    text = f"{gain.estimate:+.1%} [{gain.low:+.1%}, {gain.high:+.1%}] over {gain.tasks} tasks"
    return text + (" *" if gain.excludes_zero else "")
