"""`agenttrain recipe`: demonstrations -> SFT -> (screening) -> GRPO -> evaluation of each stage.

Every stage writes into one run folder and is skipped when it already finished, so an
interrupted recipe continues where it stopped. A finished stage is reused only with the
settings it ran with (`stages.json`, `run/stages.py`); other settings are refused, naming the
changed keys and the folders to remove. The base model, the SFT checkpoint and the
SFT+GRPO checkpoint are evaluated on the same held-out tasks and seeds; `report.md` holds
the comparison table and plot. With `rft.enabled`, the RFT baseline (SFT continued on the SFT
model's own solved episodes) is trained and evaluated beside them. With `screen.enabled`, the
SFT model first plays the tasks GRPO can draw, and GRPO's frontier sampling counts them.

    <out>/demos.jsonl  <out>/sft/  <out>/screen/  <out>/grpo/  <out>/rft/  <out>/eval/
    <out>/report.md
"""

from __future__ import annotations

import json
import resource
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from agenttrain import config as config_io
from agenttrain.eval.metrics import Difference
from agenttrain.eval.runner import EvalConfig
from agenttrain.recipe.config import UPSTREAM, RecipeConfig, positions
from agenttrain.recipe.report import RecipeReport
from agenttrain.rl.config import DemoLossConfig
from agenttrain.rollout.engine import RolloutConfig
from agenttrain.run import checkpoint
from agenttrain.run.runtime import release_freed_memory
from agenttrain.run.stages import (
    StageChanged,
    StageRecords,
    StageTimes,
    without_unrecorded_defaults,
)

if TYPE_CHECKING:
    from agenttrain.rl.config import TrainConfig
    from agenttrain.sft.config import SFTConfig

NEW_DEMOS_SETTINGS = {
    "recovery": 0.0,
    "recovery_style": "plain",
    "recovery_from": "craft",
    "quote_recipes": False,
    "quote_ingredients": False,
    "still_needed": False,
    "todo": False,
}
"""Settings of the demos stage added after recipes began recording theirs, at the value that
earlier runs had (a record without them still matches)."""
NEW_SFT_SETTINGS = {
    "data.repeat": {"where": None, "times": 2},
    "trainer.stop_patience": None,
    "trainer.stop_min_delta": 0.0,
}
"""The same for the SFT stage's config."""
NEW_GRPO_SETTINGS = {
    "data.frontier.replay": 0,
    "data.frontier.keep": "all",
    "data.frontier.rescreen_every": 0,
    "data.frontier.rescreen_samples": 4,
    "actor.demo_loss": DemoLossConfig().model_dump(mode="json"),
}
"""The same for the GRPO stage's config."""


def peak_memory_gb() -> float:
    """This process's peak resident set so far, in GB (`ru_maxrss`: KiB on Linux, bytes on
    macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak * (1 if sys.platform == "darwin" else 1024) / 1e9, 2)


class Recipe(RecipeReport):
    def __init__(self, config: RecipeConfig, console: Console | None = None) -> None:
        from agenttrain.rl.config import TrainConfig

        self.config = config
        self.console = console or Console()
        self.out = config.run.out_dir
        seed = f"run.seed={config.run.seed}"
        self.demos_path = self.out / "demos.jsonl"
        # both configs are read (and checked) before anything runs
        self.sft_config = self._sft_stage_config(self.out / "sft", self.demos_path)
        self.sft_start = self._given_sft(config.sft.checkpoint)
        self.grpo_overrides = [
            *self._demo_loss_data(),
            *config.grpo.overrides,
            seed,
            f"run.out_dir={self.out / 'grpo'}",
            f"env.name={config.demos.env}",
            f"rollout.action_format={config.demos.action_format}",
        ]
        self.grpo_config = config_io.load(TrainConfig, config.grpo.config, self.grpo_overrides)
        self.grpo_group_size = self.grpo_config.data.group_size
        self.rft_dir = self.out / "rft"
        self.rft_config = self._sft_stage_config(
            self.rft_dir / "sft", self.rft_dir / "own.jsonl", config.rft.overrides
        )
        self.timings: dict[str, float] = {}
        """Wall seconds of each stage in this invocation (a reused stage: about 0)."""
        self.stage_times = StageTimes(self.out)
        """Wall seconds of each stage summed over every invocation in this folder."""
        self.reused: set[str] = set()
        """Stages this run found finished and reused."""
        self.peak_memory_gb: dict[str, float] = {}
        """The process's peak resident memory when each stage ended (a stage that raised the
        peak shows it; the recipe runs every stage in one process)."""
        self.records = StageRecords(self.out)

    @staticmethod
    def _given_sft(spec: str | None) -> str | None:
        """`sft.checkpoint` as the checkpoint folder it names (a run folder's newest), checked
        before anything runs; None when the recipe trains its own SFT."""
        from agenttrain.policy.models import resolve

        if spec is None:
            return None
        found = resolve(spec)
        if found.path is None:
            raise ValueError(f"sft.checkpoint={spec!r} is not a checkpoint or run folder")
        return str(found.path)

    def _demo_loss_data(self) -> list[str]:
        """A demonstration loss in the GRPO overrides (`actor.demo_loss.*`) trains on the
        recipe's own demonstrations and its SFT stage's sample of them (same seed and
        `data.limit`), unless the overrides name other data."""
        named = {override.split("=", 1)[0].strip() for override in self.config.grpo.overrides}
        if not any(key.startswith("actor.demo_loss.") for key in named):
            return []
        found = []
        if "actor.demo_loss.data" not in named:
            found.append(f"actor.demo_loss.data=[{self.demos_path}]")
        limit = self.sft_config.data.limit
        if "actor.demo_loss.limit" not in named and limit is not None:
            found.append(f"actor.demo_loss.limit={limit}")
        return found

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
        screened = None
        if self.config.screen.enabled:
            screened = self._stage("screening", lambda: self.screen(sft_checkpoint))
        grpo_checkpoint = self._stage("GRPO", lambda: self.train_grpo(sft_checkpoint, screened))
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
        try:
            result = work()
        except StageChanged:
            raise  # refused before any work: the folder stays as it was
        except BaseException:
            self._count_time(name, started)  # stopped or failed: the time was spent all the same
            raise
        self._count_time(name, started)
        self.peak_memory_gb[name] = peak_memory_gb()
        release_freed_memory()
        return result

    def _count_time(self, name: str, started: float) -> None:
        """This run's time for the stage; added to the folder's total unless the stage was
        only reused (its work was counted when it ran, and a refused rerun changes nothing)."""
        self.timings[name] = time.perf_counter() - started
        if name not in self.reused:
            self.stage_times.add(name, self.timings[name])

    def make_demos(self) -> Path:
        from agenttrain.sft.demos import (
            add_needs,
            add_quotes,
            add_recovery,
            add_todo,
            write_demos,
        )

        settings = self.stage_settings("demos")
        if self.demos_path.exists():
            self._reuse("demos", settings, self.demos_path, "sft", "screen", "grpo", "rft", "eval")
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
        seed = self.config.run.seed
        if demos.todo:
            planned, recovered = add_todo(
                staging, demos.env, demos.action_format, demos.recovery, seed
            )
            self.console.print(f"{planned} of {result.kept} rewritten to probe and carry a to-do")
        else:
            recovered = add_recovery(
                staging, demos.env, demos.recovery, seed, demos.recovery_style, demos.recovery_from
            )
        if demos.quote_recipes:
            add_quotes(staging, demos.env, demos.action_format, demos.quote_ingredients)
        if demos.still_needed:
            add_needs(staging, demos.env, demos.action_format)
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
        if self.sft_start is not None:
            return self._use_given_sft(settings, self.sft_start)
        done = checkpoint.finished(self.sft_config.run.out_dir)
        if done is None:
            limit = min(self.config.eval.max_new_tokens, self.grpo_config.rollout.max_new_tokens)
            SFTTrainer(self.sft_config, self.console, generation_limit=limit).train()
            done = checkpoint.finished(self.sft_config.run.out_dir)
            if done is None:
                raise KeyboardInterrupt  # stopped by Ctrl-C; the checkpoint is kept
            self.records.record("SFT", settings)
        else:
            self._reuse("SFT", settings, self.out / "sft", "screen", "grpo", "rft", "eval")
            self.console.print(f"SFT already finished: {done['checkpoint']}")
        return str(done["checkpoint"])

    def _use_given_sft(self, settings: dict[str, Any], start: str) -> str:
        """`sft.checkpoint`: record it as the SFT stage, so that the later stages' records
        name it and a rerun from another checkpoint reuses nothing it does not match."""
        later = [self.out / name for name in ("sft", "screen", "grpo", "rft", "eval")]
        made = [folder for folder in later if folder.exists()]
        if made:  # what they hold started from the recorded SFT
            self.records.check("SFT", settings, made[0], made[1:])
            self.reused.add("SFT")
        self.records.record("SFT", settings)
        self.console.print(f"SFT: starting from {start} (sft.checkpoint; no SFT trained here)")
        return start

    def grpo_stage_config(self, start: str, screened: Path | None = None) -> TrainConfig:
        """The GRPO stage's config from `start`; with `screened` episodes, tasks are sampled
        by frontier with those episodes counted before step 1."""
        from agenttrain.rl.config import TrainConfig

        overrides = [*self.grpo_overrides, f"model.path={start}"]
        if screened is not None:
            overrides += ["data.task_sampling=frontier", f"data.frontier.seed_from=[{screened}]"]
            overrides.append(f"data.frontier.keep={self.config.screen.keep}")
        return config_io.load(TrainConfig, self.config.grpo.config, overrides)

    def train_grpo(self, start: str, screened: Path | None = None) -> str:
        from agenttrain.rl.trainer import Trainer

        config = self.grpo_stage_config(start, screened)
        settings = self.stage_settings("GRPO", config.model_dump(mode="json"))
        done = checkpoint.finished(config.run.out_dir)
        more = self.grpo_steps_added(settings) if done is not None else None
        if more is not None:
            self.console.print(
                f"GRPO finished {more[0]} steps; continuing to {more[1]} from its last "
                "checkpoint (exact resume)"
            )
        if done is None or more is not None:
            trainer = Trainer(config, self.console)
            trainer.train()
            done = checkpoint.finished(config.run.out_dir)
            if done is None or done["step"] < config.trainer.total_steps:
                raise KeyboardInterrupt  # stopped: an earlier finish is not this one
            self.records.record("GRPO", settings)
        else:
            self._reuse("GRPO", settings, self.out / "grpo", "eval")
            self.console.print(f"GRPO already finished: {done['checkpoint']}")
        return str(done["checkpoint"])

    def grpo_steps_added(self, settings: dict[str, Any]) -> tuple[int, int] | None:
        """(steps run, steps asked) when the finished GRPO stage differs from `settings` only
        by a larger `trainer.total_steps`: the stage continues rather than being refused, so
        "more steps" is the same command with one number changed. Fewer steps, or any other
        change, is refused as before."""
        found = self.records.differences("GRPO", settings)
        if found is None:
            return None
        changes, added = found
        key = "grpo.trainer.total_steps"
        if added or set(changes) != {key}:
            return None
        ran, asked = changes[key]
        return (ran, asked) if asked > ran else None

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
        sampler = self.training_play(
            model,
            self.config.demos.split,
            self.rft_tasks(),
            n=rft.n or self.grpo_group_size,
            temperature=rft.temperature,
            rollout=RolloutConfig(max_turns=rft.max_turns, max_new_tokens=rft.max_new_tokens),
        )
        own = self.rft_dir / "own.jsonl"
        counts_file = self.rft_dir / "sampling.json"
        own_settings = sampler.model_dump(mode="json", exclude={"out", "workers"})
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

    def training_play(
        self,
        model: str,
        split: str,
        tasks: list[int],
        n: int,
        temperature: float,
        rollout: RolloutConfig,
    ) -> EvalConfig:
        """`model` playing training tasks (RFT's samples, screening): the recipe's environment,
        action format, seed, device and episodes at once (`eval.concurrency`)."""
        return EvalConfig(
            env=self.config.demos.env,
            split=split,
            tasks=tasks,
            models=[model],
            n=n,
            seeds=[self.config.run.seed],
            temperature=temperature,
            rollout=rollout.model_copy(
                update={
                    "action_format": self.config.demos.action_format,
                    "max_in_flight": self.config.eval.concurrency,
                }
            ),
            device=self.sft_config.model.device,
            workers=self.eval_workers,
        )

    @property
    def eval_workers(self) -> int:
        """`eval.workers` on a CPU; a GPU is fed by one process."""
        return self.config.eval.workers if self.sft_config.model.device == "cpu" else 1

    def screen(self, model: str) -> Path:
        """`model`'s episodes on the tasks GRPO can draw, in <out>/screen/ (a finished
        screening with the same settings is reused; a stopped one continues)."""
        from agenttrain.eval.runner import evaluate, slug

        screen, grpo = self.config.screen, self.grpo_config
        config = self.training_play(
            model,
            grpo.env.split,
            self.screen_tasks(),
            n=screen.n,
            temperature=grpo.sampling.temperature
            if screen.temperature is None
            else screen.temperature,
            rollout=RolloutConfig(
                max_turns=screen.max_turns or grpo.env.max_turns or grpo.rollout.max_turns,
                max_new_tokens=screen.max_new_tokens or grpo.rollout.max_new_tokens,
            ),
        ).model_copy(update={"out": self.out / "screen"})
        own = config.model_dump(mode="json", exclude={"out", "workers"})
        settings = self.stage_settings("screening", own)
        folder = config.out / slug(model)
        if (folder / "summary.json").exists():
            self._reuse("screening", settings, folder, "grpo", "rft", "eval")
            self.console.print(f"using the screening episodes in {folder}")
        else:
            evaluate(config, self.console)
            self.records.record("screening", settings)
        return folder / "episodes.jsonl"

    def screen_tasks(self) -> list[int]:
        """Positions screening plays: `screen.tasks`, else every task of GRPO's training
        split that GRPO can draw (its `env.task_strata`)."""
        from agenttrain.envs import get_spec
        from agenttrain.rl.environments import tasks_in_strata

        tasks = self.config.screen.tasks
        if tasks is not None:
            return positions(tasks)
        env = self.grpo_config.env
        spec = get_spec(env.name)
        ids = list(spec.split(env.split))
        drawn = set(tasks_in_strata(spec, env, ids))
        return [position for position, task in enumerate(ids) if task in drawn]

    def rft_tasks(self) -> list[int]:
        """Split positions RFT samples: `rft.tasks`, else the tasks the GRPO stage played."""
        from agenttrain.eval.runner import select_tasks
        from agenttrain.rollout.trajectory import read_jsonl

        tasks = self.config.rft.tasks
        if tasks is not None:
            return positions(tasks)
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
            recorded = (self.records.get("demos") or {}).get("demos")
            without_unrecorded_defaults(demos, recorded, NEW_DEMOS_SETTINGS)
            return {"demos": demos, "seed": self.config.run.seed}
        if stage == "SFT" and self.sft_start is not None:
            return {"checkpoint": self.sft_start}
        if stage == "SFT":
            own = self.sft_config.model_dump(mode="json")
            recorded = (self.records.get("SFT") or {}).get("sft")
            without_unrecorded_defaults(own, recorded, NEW_SFT_SETTINGS)
            return {"sft": own, "demos": self.records.get("demos") or self.stage_settings("demos")}
        if stage == "screening":
            return {"screen": own, "sft": self.records.get("SFT") or self.stage_settings("SFT")}
        if stage == "GRPO":
            recorded = (self.records.get("GRPO") or {}).get("grpo")
            without_unrecorded_defaults(own or {}, recorded, NEW_GRPO_SETTINGS)
            settings = {"grpo": own, "sft": self.records.get("SFT") or self.stage_settings("SFT")}
            if self.config.screen.enabled:
                settings["screening"] = self.records.get("screening")
            return settings
        if stage == "RFT samples":
            return {"rft": own, "sft": self.records.get("SFT") or self.stage_settings("SFT")}
        if stage == "RFT":
            return {"rft": own, "samples": self.records.get("RFT samples")}
        upstream = UPSTREAM[stage]
        return {"eval": own, "model": self.records.get(upstream) if upstream else None}

    def _reuse(self, stage: str, settings: dict[str, Any], folder: Path, *later: str) -> None:
        """Refuse to reuse a finished stage that ran with other settings."""
        self.reused.add(stage)
        if not self.records.check(stage, settings, folder, [self.out / name for name in later]):
            self.console.print(
                f"[yellow]{folder} has no record of its settings (made before they were "
                "recorded): reused as it is[/]"
            )

    def eval_config(self, models: list[str]) -> EvalConfig:
        settings = self.config.eval
        tasks = positions(settings.tasks)
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
            workers=self.eval_workers,
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
            own = single.model_dump(mode="json", exclude={"out", "workers"})  # speed only
            settings = self.stage_settings(label, own)
            if (folder / "summary.json").exists():
                self._reuse(f"eval {label}", settings, folder)
                summary = json.loads((folder / "summary.json").read_text())
                results.append(ModelResult(model, summary, folder / "episodes.jsonl", 0.0))
                self.console.print(f"{label}: already evaluated ({folder})")
                continue
            results += evaluate(single, self.console)
            release_freed_memory()  # each model's policy and cache were its own
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
