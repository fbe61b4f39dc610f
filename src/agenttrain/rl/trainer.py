"""The GRPO trainer (and relatives): rollout -> rewards -> advantages -> PPO update, per step.

One process, CPU (fp32) or one CUDA GPU (bf16 autocast). Algorithms, numerics and metric names
follow verl (`rl/advantages.py`, `rl/losses.py`, `rl/kl.py`), so results transfer to the
cluster path. A step:

1. sample `batch_tasks` training tasks (uniform: a pure function of seed and step; frontier:
   of seed, step and the per-task success counts kept so far), `group_size` episodes each,
   played by the rollout engine with the current weights;
2. score episodes (`rl/scoring.py`: environment reward or a custom verl-style function,
   with the configured partial credit and penalties); drop
   `env_error` episodes (counted) and, with dynamic sampling, groups without reward variance;
3. recompute old log-probs with the training weights; reference log-probs if KL is used;
4. advantages by the configured estimator; `ppo_epochs` passes over mini-batches, each
   accumulated over micro-batches by token budget; gradient clipping; optimizer step;
5. refresh the generation copy; log; validate, checkpoint and report on schedule.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from statistics import fmean
from typing import Any

import torch
from rich.console import Console
from rich.progress import Progress

from agenttrain.config import ConfigError
from agenttrain.eval.metrics import summarize
from agenttrain.modeling import build_trainable, load_reference, starts_from_adapter
from agenttrain.policy.base import SamplingParams
from agenttrain.policy.hf import HFPolicy
from agenttrain.rl.advantages import anchor_states, group_has_signal
from agenttrain.rl.config import GROUP_BASELINE_ESTIMATORS, TrainConfig
from agenttrain.rl.curriculum import check_oracle_start, max_turns_at, oracle_share
from agenttrain.rl.demo_loss import DemoLoss
from agenttrain.rl.environments import RunEnvironment, RunEnvironments, Slot
from agenttrain.rl.kl import KLController
from agenttrain.rl.report import write_training_report
from agenttrain.rl.rescreen import is_due, latest_before, screen_path, screen_requests, write_screen
from agenttrain.rl.run_memory import RunMemory
from agenttrain.rl.scoring import EpisodeScorer
from agenttrain.rl.stats import timed
from agenttrain.rl.step_batch import StepBatch
from agenttrain.rl.step_metrics import (
    per_environment_metrics,
    rollout_metrics,
    status_line,
    stratum_metrics,
)
from agenttrain.rl.task_stats import (
    Pick,
    TaskStats,
    TrainingTasks,
    mixed_tasks,
    pick_frontier,
    sampling_metrics,
    screened,
)
from agenttrain.rl.update import PolicyUpdate
from agenttrain.rollout.engine import EpisodeRequest, RolloutEngine, derive_seed
from agenttrain.rollout.trajectory import Trajectory, write_jsonl
from agenttrain.run import checkpoint
from agenttrain.run.runtime import (
    RunFailed,
    TrainingRun,
    lr_factor,
    release_freed_memory,
    step_progress,
)
from agenttrain.run.tracking import device_memory
from agenttrain.serving.task_map import TaskOverlap, check_split_disjoint, local_task_table


class Trainer(TrainingRun):
    config: TrainConfig

    def __init__(
        self,
        config: TrainConfig,
        console: Console | None = None,
        allow_config_change: bool = False,
    ) -> None:
        self._open_run(config, console)
        self.environments = RunEnvironments.build(
            config.environments,
            seed=config.run.seed,
            val_tasks=config.trainer.val_tasks,
            validate=bool(config.trainer.test_freq),
            default_turns=config.rollout.max_turns,
            timeout_s=config.rollout.env_timeout_s,
        )
        """The run's environments (one, or several mixed by weight) and its task stream."""
        self.screen_pool = {part.name: list(part.train_tasks) for part in self.environments.parts}
        """Each environment's drawable tasks before screening filters them (what re-screening
        plays)."""
        if config.data.frontier.keep == "mixed":
            self._keep_mixed_tasks(self._pool_counts(config.data.frontier.seed_from))
        specs = [part.spec for part in self.environments.parts]
        self.scorer = EpisodeScorer(config.reward, specs)
        """The step's reward pipeline (progress credit and penalties as `reward.*` asks)."""
        check_oracle_start(config, specs)
        self.anchor_states = anchor_states(specs, config.algorithm.gigpo.anchor)
        """States per environment (empty unless `algorithm.gigpo.anchor=state` asks)."""
        self._set_up_run(allow_config_change)
        self.model, self.tokenizer = self._build_model()
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.reference = self._build_reference()
        self.policy = HFPolicy(
            self.model,
            self.tokenizer,
            name=config.model.path,
            system_prompt=config.rollout.system_prompt,
            max_context=config.rollout.max_context,
            inference_dtype=config.model.generation_dtype,
            decode=config.model.decode,
            draft_tokens=config.model.draft_tokens,
        )
        self.optimizer = torch.optim.AdamW(
            self.params, lr=config.actor.lr, weight_decay=config.actor.weight_decay
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lr_factor)
        kl = config.algorithm.kl
        self.kl_ctrl = KLController(kl.coef, kl.adaptive, kl.target, kl.horizon)
        self.update = PolicyUpdate(
            config,
            self.model,
            self.reference,
            self.optimizer,
            self.kl_ctrl,
            self.policy.decoder.pad_id,
            self.device,
            self.anchor_states,
            self._demo_loss(),
        )
        self.step = 0
        self.first_env_error: str | None = None
        """The first environment error of the latest step (for the message that stops a run)."""
        self.tasks_consumed = 0
        """Position in the stream of training tasks (dynamic sampling draws a varying number)."""
        self.task_stats = TaskStats()
        """Successes, episodes, groups and informative groups per training task so far (what
        frontier sampling weighs)."""
        self.loop = asyncio.new_event_loop()
        """One event loop for the run: the environment sources' HTTP pools live in it."""
        self.memory = (
            RunMemory(
                config.memory, self.run_dir, self.environments.parts, config.rollout, self.loop
            )
            if config.memory.enabled
            else None
        )
        """The experience pool (the run folder's file, or a ReMe-compatible server)."""
        for part in self.environments.parts:
            self._refuse_held_out_tasks(part)
            # A wrong, dead or incomplete server fails here, before training on nothing.
            self.loop.run_until_complete(part.source.open([*part.train_tasks, *part.val_tasks]))
        if self.resume_from is not None:
            self._restore(self.resume_from)
            self._restore_kept_tasks()
        elif config.data.frontier.seed_from:
            self._screen_tasks(config.data.frontier.seed_from)

    # -- set-up ---------------------------------------------------------------------------

    def _build_model(self) -> tuple[torch.nn.Module, Any]:
        source = self.resume_from / "model" if self.resume_from else None
        return build_trainable(self.config.model, source, self.config.run.seed)

    def _demo_loss(self) -> DemoLoss | None:
        """The demonstrations `actor.demo_loss` trains on beside the policy loss (none when off);
        read and checked before any episode is played."""
        config = self.config
        if config.actor.demo_loss.coef == 0:
            return None
        return DemoLoss(
            config.actor.demo_loss,
            self.policy.template,
            [part.name for part in self.environments.parts],
            config.run.seed,
            self.policy.decoder.pad_id,
        )

    def _build_reference(self) -> torch.nn.Module | None:
        """The KL reference is the policy at step 0. LoRA over a plain model: that model is the
        live one with its adapter disabled (no copy). Otherwise (full fine-tuning, or LoRA
        continuing an SFT adapter): a frozen model read from `model.path`."""
        kl = self.config.algorithm.kl
        if not (kl.use_kl_loss or kl.in_reward):
            return None
        if checkpoint.is_peft(self.model) and not starts_from_adapter(self.config.model):
            return None
        return load_reference(self.config.model)

    def _refuse_held_out_tasks(self, part: RunEnvironment) -> None:
        """Never train on the test split's tasks: compared by task identity (TextCraft: the
        goal) where the environment has one, since ids alone may name the same task twice."""
        spec = part.spec
        if "test" not in spec.splits():
            return
        test = spec.split("test")
        if spec.task_key is None:
            shared = sorted(set(part.train_tasks) & set(test))
            if shared:
                raise TaskOverlap(
                    f"{spec.name} split {part.config.split} holds {len(shared)} {spec.name} "
                    f"test tasks (e.g. {shared[:5]}); train on another split"
                )
            return
        table = self.loop.run_until_complete(local_task_table(spec))
        check_split_disjoint(part.train_tasks, test, table)

    def _lr_factor(self, step: int) -> float:
        optim = self.config.actor
        return lr_factor(
            step, self.config.trainer.total_steps, optim.warmup_steps, optim.lr_schedule
        )

    def _restore(self, folder: Path) -> None:
        state = self._restore_training(folder)
        self.kl_ctrl.load_state_dict(state["kl_controller"])
        # Checkpoints from before dynamic-sampling refill consumed exactly batch_tasks a step.
        self.tasks_consumed = int(
            state.get("tasks_consumed", self.step * self.config.data.batch_tasks)
        )
        self.task_stats = TaskStats.from_state(state.get("task_stats", []))
        if self.memory is not None:
            self.memory.drop_after(self.step)

    def _training_tasks(self, pool: bool = False) -> dict[str, TrainingTasks]:
        """Each environment's training split and the tasks of it this run draws (`pool`: or
        may draw, before screening filters them)."""
        return {
            part.name: TrainingTasks(
                set(part.spec.split(part.config.split)),
                set(self.screen_pool[part.name] if pool else part.train_tasks),
            )
            for part in self.environments.parts
        }

    def _pool_counts(self, files: Sequence[Path]) -> TaskStats:
        """Screening episodes counted per task over the whole pool."""
        return screened(files, self._training_tasks(pool=True))[0]

    def _keep_mixed_tasks(self, counts: TaskStats, rescreen: bool = False) -> None:
        """`data.frontier.keep=mixed`: draw only the pool tasks the screening episodes
        (`counts`) both solved and failed. Applied again on resume (the same files give the
        same tasks). An environment with no such task is an error before step 1; at a
        re-screening it keeps the tasks it had, with a warning (the run goes on)."""
        keep = mixed_tasks(counts)
        for part in self.environments.parts:
            pool = self.screen_pool[part.name]
            mine = [task for task in pool if (part.name, task) in keep]
            if mine:
                self.environments.narrow(part.name, mine)
                self.console.print(
                    f"frontier sampling: {part.name} keeps {len(mine)} of {len(pool)} "
                    "training tasks, those its screening episodes both solved and failed"
                )
            elif rescreen:
                self.console.print(
                    f"[yellow]re-screening: no {part.name} task was both solved and failed; "
                    f"keeping the {len(part.train_tasks)} tasks of the last screening[/]"
                )
            else:
                raise ConfigError(
                    f"data.frontier.keep=mixed: none of {part.name}'s {len(pool)} training "
                    "tasks was both solved and failed in data.frontier.seed_from's episodes; "
                    "screen with more samples a task (agenttrain eval -n 4) or set keep=all"
                )

    def _restore_kept_tasks(self) -> None:
        """A resumed run draws from the latest re-screening before its checkpoint (statistics
        come from the checkpoint)."""
        latest = latest_before(self.run_dir, self.step)
        if self.config.data.frontier.keep == "mixed" and latest is not None:
            self._keep_mixed_tasks(self._pool_counts([latest]), rescreen=True)

    def _rescreen(self, progress: Progress, bar: Any) -> dict[str, float]:
        """`data.frontier.rescreen_every`: the current policy plays every pool task again; the
        tasks it both solves and fails are drawn from here on, and their counts replace the
        statistics (older counts describe an older policy). A screening this step already
        wrote (by a run stopped after it) is read, not played again."""
        frontier = self.config.data.frontier
        file = screen_path(self.run_dir, self.step)
        timing: dict[str, float] = {}
        if not file.is_file():
            limits = self._turn_limits(self.step + 1)
            requests = screen_requests(
                self.screen_pool, frontier.rescreen_samples, self.step, self.config.run.seed, limits
            )
            tally = {"played": 0, "solved": 0}

            def show(episode: Trajectory) -> None:
                tally["played"] += 1
                tally["solved"] += int(episode.success)
                progress.update(
                    bar,
                    status=f"re-screening: {tally['played']}/{len(requests)} episodes · "
                    f"solved {tally['solved']}",
                )

            with timed(timing, "screen"):
                episodes, _ = self._rollout(requests, self._sampling(), show)
            write_screen(file, episodes)
        counts = self._pool_counts([file])
        self.console.print(
            f"re-screened after step {self.step}: success {counts.success_rate():.1%} over "
            f"{sum(r.episodes for r in counts.records.values())} episodes"
        )
        self._keep_mixed_tasks(counts, rescreen=True)
        drawn_keys = {
            (part.name, task) for part in self.environments.parts for task in part.train_tasks
        }
        self.task_stats = TaskStats({k: r for k, r in counts.records.items() if k in drawn_keys})
        drawn = len(drawn_keys)
        return {
            "screen/success": counts.success_rate(),
            "screen/kept_tasks": drawn,
            **timing,
        }

    def _screen_tasks(self, files: Sequence[Path]) -> None:
        """Per-task statistics from `data.frontier.seed_from` before step 1 (a resumed run
        restores them with the rest of its statistics instead)."""
        self.task_stats, skipped = screened(files, self._training_tasks())
        episodes = sum(record.episodes for record in self.task_stats.records.values())
        left_out = f"; {skipped} episodes of tasks this run never draws left out" if skipped else ""
        self.console.print(
            f"frontier sampling: {len(self.task_stats)} tasks known from {episodes} episodes "
            f"of {len(files)} file(s), success {self.task_stats.success_rate():.1%}{left_out}"
        )

    # -- the loop ---------------------------------------------------------------------------

    def _train(self) -> Path:
        config = self.config
        tracker = self._start_training()
        last_saved = self.step if self.resume_from else None
        failure = None
        try:
            with step_progress(self.console) as progress:
                bar = progress.add_task(
                    "training", total=config.trainer.total_steps, completed=self.step, status=""
                )
                if self.step == 0 and self.memory is not None:
                    self.memory.seed(self.console)
                if self.step == 0 and self.has_validation and config.trainer.val_before_train:
                    progress.update(bar, status="validating the starting model")
                    tracker.log(self.validate(0), 0)
                while self.step < config.trainer.total_steps and not self.stop_requested:
                    screening: dict[str, float] = {}
                    if is_due(config.data.frontier, self.step):
                        screening = self._rescreen(progress, bar)
                        if self.stop_requested:
                            break
                    self.step += 1
                    metrics = self.train_step(self.step, progress, bar) | screening
                    failure = self._env_error_failure(metrics)
                    validate = self.has_validation and self.step % config.trainer.test_freq == 0
                    if validate and failure is None:
                        progress.update(bar, status="validating")
                        metrics.update(self.validate(self.step))
                    tracker.log(metrics, self.step)
                    progress.update(bar, advance=1, status=status_line(metrics))
                    if failure is not None:
                        break
                    if self.step % config.trainer.save_freq == 0 or self.stop_requested:
                        self.save()
                        last_saved = self.step
            if failure is None and last_saved != self.step:
                self.save()
        finally:
            self.stop.restore()
            tracker.close()
            for part in self.environments.parts:
                self.loop.run_until_complete(part.source.aclose())
            if self.memory is not None:
                self.memory.close()
        report = write_training_report(self.run_dir, config)
        if failure is not None:
            raise RunFailed(f"{failure}\nReport: {report}")
        self.finish(report)
        return self.run_dir

    def _env_error_failure(self, metrics: dict[str, float]) -> str | None:
        """Why the run must stop, when the step lost too many episodes to env errors."""
        limit = self.config.trainer.max_env_error_rate
        if metrics["rollout/error_rate"] <= limit:
            return None
        episodes = metrics["rollout/episodes"]
        lost = [
            f"{metrics[f'rollout/{kind}_error_episodes']:.0f} of {episodes:.0f} episodes ended "
            f"in {label} errors"
            for kind, label in (("env", "environment"), ("agent", "agent"))
            if metrics[f"rollout/{kind}_error_episodes"]
        ]
        return (
            f"step {self.step}: {'; '.join(lost)} "
            f"(more than trainer.max_env_error_rate={limit}; first error: "
            f"{self.first_env_error}); stopped without saving this step. Check the "
            f"environment ({self._where()}), then run the same command to resume"
        )

    def save(self) -> Path:
        state = {
            "kl_controller": self.kl_ctrl.state_dict(),
            "tasks_consumed": self.tasks_consumed,
            "task_stats": self.task_stats.state(),
        }
        generation = {
            "env": self.config.env.name,
            **self.config.rollout.model_dump(
                include={
                    "action_format",
                    "prompt_style",
                    "max_new_tokens",
                    "max_turns",
                    "max_context",
                    "system_prompt",
                }
            ),
        }
        folder = self._save_checkpoint(state, generation)
        write_training_report(self.run_dir, self.config)
        return folder

    # -- one step ---------------------------------------------------------------------------

    @property
    def has_validation(self) -> bool:
        return any(part.val_tasks for part in self.environments.parts)

    def _where(self) -> str:
        return "; ".join(
            f"{part.name}: {part.source.describe()}" for part in self.environments.parts
        )

    def task_at(self, slot: int) -> int:
        """The training task at position `slot` of the task stream (a pure function of the
        seed and the position; several environments take turns by weight)."""
        return self.environments.slot(slot).task

    def take_tasks(self, count: int) -> list[Slot]:
        """The next `count` slots of the stream. A slot names one group: the same task drawn
        twice (across an epoch boundary, or by frontier sampling) is two groups with their own
        seeds."""
        return [pick.slot for pick in self._draw(count)]

    def _draw(self, count: int, earlier: Sequence[Pick] = ()) -> list[Pick]:
        """The next `count` slots with how they were chosen: uniform mode takes the stream's
        task (priority 0); frontier mode picks among the slot's candidates by priority, and
        replays no task already picked in the step (`earlier` rounds, or this one)."""
        start = self.tasks_consumed
        self.tasks_consumed += count
        indices = range(start, start + count)
        data = self.config.data
        if data.task_sampling == "uniform":
            return [Pick(self.environments.slot(index), 0.0, False) for index in indices]
        played = {(pick.slot.env, pick.slot.task) for pick in earlier}
        picks = []
        for index in indices:
            pick = pick_frontier(
                self.environments.candidates(index, data.frontier.candidates),
                self.task_stats,
                data.frontier,
                self.config.run.seed,
                self._stratum,
                played,
            )
            played.add((pick.slot.env, pick.slot.task))
            picks.append(pick)
        return picks

    def _stratum(self, key: tuple[str, int]) -> str | None:
        """A task's difficulty class, where its environment knows one without playing it."""
        env, task = key
        classify = self.environments[env].spec.task_stratum
        return None if classify is None else classify(task)

    def _rollout(
        self,
        requests: list[tuple[str, EpisodeRequest]],
        sampling: SamplingParams,
        on_episode: Callable[[Trajectory], None] | None = None,
    ) -> tuple[list[Trajectory], dict[str, float]]:
        """Play (environment, request) pairs; each environment with its own engine (its spec,
        prompts, action format and turn limit), results in request order; `on_episode` sees
        each episode as it ends."""
        results: dict[int, Trajectory] = {}
        stats: dict[str, float] = {}
        for part in self.environments.parts:
            mine = [(i, r) for i, (env, r) in enumerate(requests) if env == part.name]
            if not mine:
                continue
            rollout = self.config.rollout.model_copy(
                update={
                    "action_format": part.config.action_format or self.config.rollout.action_format
                }
            )
            engine = RolloutEngine(
                self.policy,
                part.spec,
                part.source.environment,
                rollout,
                sampling,
                experience=self.memory.retrieve if self.memory is not None else None,
                on_episode=on_episode,
            )
            played = self.loop.run_until_complete(engine.run([r for _, r in mine]))
            results.update({i: t for (i, _), t in zip(mine, played, strict=True)})
            for key, value in engine.stats.items():
                stats[key] = stats.get(key, 0.0) + value
        return [results[i] for i in range(len(requests))], stats

    def _turn_limits(self, step: int) -> dict[str, int]:
        """Each environment's turn limit at `step` (a curriculum's, or its own)."""
        schedule = self.config.algorithm.max_turns_schedule
        return {
            part.name: max_turns_at(step, schedule, part.turn_limit)
            for part in self.environments.parts
        }

    def _sampling(self) -> SamplingParams:
        config = self.config
        return SamplingParams(
            temperature=config.sampling.temperature,
            top_p=config.sampling.top_p,
            top_k=config.sampling.top_k,
            max_new_tokens=config.rollout.max_new_tokens,
        )

    def train_step(
        self, step: int, progress: Progress | None = None, bar: Any = None
    ) -> dict[str, float]:
        config = self.config
        timing: dict[str, float] = {}
        metrics: dict[str, float] = {
            "training/global_step": step,
            "training/epoch": self.environments.epoch(self.tasks_consumed),
        }
        max_turns = self._turn_limits(step)
        sampling = self._sampling()
        picks: list[Pick] = []
        batch = self._collect(step, sampling, max_turns, timing, picks, progress, bar)
        trajectories, scores = batch.trajectories, batch.scores
        if config.trainer.save_trajectories:
            write_jsonl(self.run_dir / "trajectories" / f"step-{step:06d}.jsonl", trajectories)
        metrics.update(
            self._rollout_metrics(trajectories, scores, batch.engine_stats, max(max_turns.values()))
        )
        self.first_env_error = next((t.error for t in trajectories if t.errored), None)
        metrics.update({key: fmean(values) for key, values in batch.reward_extra.items() if values})
        if self.scorer.progress:
            metrics["reward/progress_weight"] = self.scorer.progress_weight(step)
        if self.memory is not None:
            metrics.update(self.memory.remember(step, trajectories))
        metrics["train/num_gen_batches"] = batch.rounds
        metrics["rollout/filtered_groups"] = batch.filtered_groups
        metrics["rollout/dropped_groups_env_error"] = batch.dropped_groups
        metrics["rollout/informative_groups"] = batch.informative_groups
        played_groups = len({t.group_id for t in trajectories})
        metrics["rollout/played_groups"] = played_groups
        metrics["rollout/informative_group_share"] = batch.informative_groups / played_groups
        metrics["rollout/success_mixed_group_share"] = batch.success_mixed_share()
        metrics.update(stratum_metrics(trajectories, batch.informative_ids, self._stratum))
        if config.data.task_sampling == "frontier":
            metrics.update(sampling_metrics(picks, self.task_stats, config.data.frontier))
        metrics["rollout/trained_groups"] = batch.trained_groups
        metrics["rollout/trained_episodes"] = len(batch.kept)
        if progress is not None:
            progress.update(bar, status=f"step {step}: updating on {len(batch.kept)} episodes")
        model_tokens = sum(sum(trajectories[i].response_mask) for i in batch.kept)
        if model_tokens:
            self.policy.free_cache()  # the update needs the memory and makes the cache stale
            release_freed_memory()
            metrics.update(
                self.update.learn(
                    [trajectories[i] for i in batch.kept],
                    [scores[i] for i in batch.kept],
                    timing,
                    step,
                )
            )
            with timed(timing, "update_weights"):
                self.policy.sync_weights()
        elif batch.kept:
            self.console.print(
                f"step {step}: no update: the model wrote no token in {len(batch.kept)} episodes "
                "(each hit rollout.max_context before its first reply)"
            )
        else:  # said where the user looks, not only in the report (issue 28)
            self.console.print(
                f"step {step}: no update: no group with a learning signal "
                f"({batch.informative_groups} informative, {batch.dropped_groups} dropped for "
                f"env errors, of {played_groups}; {batch.rounds} generation round(s))"
            )
        with (
            warnings.catch_warnings()
        ):  # a step that trained on nothing still advances the schedule
            warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step")
            self.scheduler.step()
        metrics["actor/lr"] = self.scheduler.get_last_lr()[0]
        timing["timing_s/step"] = sum(timing.values())
        metrics.update(timing)
        generated = metrics.get("perf/generated_tokens", 0.0)
        metrics["perf/throughput"] = generated / max(timing["timing_s/gen"], 1e-9)
        metrics.update(device_memory(self.device))
        return metrics

    def _collect(
        self,
        step: int,
        sampling: SamplingParams,
        max_turns: dict[str, int],
        timing: dict[str, float],
        picks: list[Pick],
        progress: Progress | None,
        bar: Any,
    ) -> StepBatch:
        """Play groups until the step has `batch_tasks` groups to train on; `picks` receives
        how each round's tasks were drawn.

        Without dynamic sampling that is one round. With it (DAPO), groups whose rewards do
        not differ are set aside and new tasks are drawn, up to `max_num_gen_batches` rounds;
        surplus informative groups of the last round are not trained on. Each round's episodes
        are counted in the task statistics before the next round draws.
        """
        config = self.config
        wanted = config.data.batch_tasks
        dynamic = config.algorithm.filter_groups
        batch = StepBatch()
        while True:
            batch.rounds += 1
            drawn = self._draw(wanted, picks)
            picks += drawn
            slots = [pick.slot for pick in drawn]
            guided = {
                slot.index: config.memory.guided_samples(
                    config.data.group_size, derive_seed(config.run.seed, "memory", slot.index)
                )
                for slot in slots
            }
            requests = [
                (
                    slot.env,
                    EpisodeRequest(
                        slot.task,
                        group_id=self._group_id(step, slot),
                        sample=sample,
                        seed=derive_seed(config.run.seed, "train", slot.index),
                        max_turns=max_turns[slot.env],
                        with_experience=sample in guided[slot.index],
                        oracle_share=oracle_share(config, step, slot.index),
                    ),
                )
                for slot in slots
                for sample in range(config.data.group_size)
            ]
            if progress is not None:
                round_note = f" (round {batch.rounds})" if batch.rounds > 1 else ""
                progress.update(
                    bar, status=f"step {step}: playing {len(requests)} episodes{round_note}"
                )
            with timed(timing, "gen"):
                trajectories, engine_stats = self._rollout(requests, sampling)
            with timed(timing, "reward"):
                scores, reward_extra = self.scorer.score(trajectories, step, self.tokenizer)
            batch.add(trajectories, scores, engine_stats, reward_extra)
            # An oracle start makes a task look easier than it is: its estimate ignores them.
            self.task_stats.record([t for t in trajectories if not t.oracle_turns])
            groups, dropped = self._trainable_groups(batch)
            informative = [g for g in groups if self._has_signal(batch, g)]
            batch.informative_ids = {batch.trajectories[group[0]].group_id for group in informative}
            round_ids = {request.group_id for _, request in requests}
            self.task_stats.record_groups(self._round_groups(batch, round_ids, groups))
            if not dynamic.enabled:
                batch.select(groups, dropped=dropped, filtered=0)
                return batch
            if len(informative) >= wanted or batch.rounds >= dynamic.max_num_gen_batches:
                batch.select(
                    informative[:wanted],
                    dropped=dropped,
                    filtered=len(groups) - len(informative),
                )
                return batch

    def _has_signal(self, batch: StepBatch, group: list[int]) -> bool:
        """Whether the group gives any non-zero advantage under the configured estimator
        (GiGPO with γ < 1 also learns from all-solved groups of different path lengths)."""
        algorithm = self.config.algorithm
        return group_has_signal(
            algorithm.adv_estimator,
            [batch.trajectories[i] for i in group],
            [batch.scores[i] for i in group],
            algorithm.gamma,
            self.anchor_states,
        )

    @staticmethod
    def _round_groups(
        batch: StepBatch, round_ids: set[str], groups: list[list[int]]
    ) -> list[tuple[tuple[str, int], bool]]:
        """(task, whether its rewards differed) for this round's groups from scratch that kept a
        baseline; earlier rounds' groups were counted when they were played."""
        counted = []
        for group in groups:
            first = batch.trajectories[group[0]]
            if first.group_id in round_ids and not first.oracle_turns:
                counted.append(
                    ((first.env, first.task_id), first.group_id in batch.informative_ids)
                )
        return counted

    def _group_id(self, step: int, slot: Slot) -> str:
        env = f"{slot.env}:" if self.environments.multi else ""
        return f"{step}:{slot.index}:{env}{slot.task}"

    def _rollout_metrics(
        self,
        trajectories: list[Trajectory],
        scores: list[float],
        engine_stats: dict[str, float],
        max_turns: int,
    ) -> dict[str, float]:
        """The step's rollout metrics with this run's action verbs, and `env/<name>/...` per
        environment when several are mixed."""
        parts = self.environments.parts
        metrics = rollout_metrics(
            trajectories,
            scores,
            engine_stats,
            max_turns,
            {part.name: part.spec.action_verbs for part in parts},
            oracle_start=bool(self.config.data.oracle_start.max_share),
        )
        if self.environments.multi:
            names = [part.name for part in parts]
            metrics.update(per_environment_metrics(trajectories, scores, names))
        return metrics

    def _trainable_groups(self, batch: StepBatch) -> tuple[list[list[int]], int]:
        """Groups (episode indices) that can be trained on, and how many were dropped:
        env-error episodes are removed, and a group left with fewer than two episodes has no
        baseline when the estimator's baseline is the group, so it is dropped."""
        members: dict[str, list[int]] = {}
        for index, trajectory in enumerate(batch.trajectories):
            group = members.setdefault(trajectory.group_id, [])
            if not trajectory.errored:
                group.append(index)
        needs_peers = (
            self.config.algorithm.adv_estimator in GROUP_BASELINE_ESTIMATORS
            and self.config.data.group_size > 1
        )
        groups = list(members.values())
        survivors = [g for g in groups if len(g) >= 2 or (g and not needs_peers)]
        return survivors, len(groups) - len(survivors)

    # -- validation ---------------------------------------------------------------------------

    def validate(self, step: int) -> dict[str, float]:
        """Play the held-out tasks with the eval engine; `val/*` metrics (and
        `val/<env>/*` per environment in a multi-environment run)."""
        config = self.config.trainer
        sampling = SamplingParams(
            temperature=config.val_temperature,
            top_p=self.config.sampling.top_p,
            max_new_tokens=self.config.rollout.max_new_tokens,
        )
        requests = [
            (
                part.name,
                EpisodeRequest(
                    task,
                    group_id=f"val:{part.name}:{task}",
                    sample=sample,
                    seed=derive_seed(self.config.run.seed, "val", sample),
                    max_turns=part.turn_limit,
                ),
            )
            for part in self.environments.parts
            for task in part.val_tasks
            for sample in range(config.val_n)
        ]
        self.model.eval()
        try:
            trajectories, _ = self._rollout(requests, sampling)
        finally:
            self.model.train()
        if self.config.trainer.save_trajectories:
            write_jsonl(self.run_dir / "trajectories" / f"val-step-{step:06d}.jsonl", trajectories)
        metrics = _numbers("val", summarize(trajectories))
        if self.environments.multi:
            for part in self.environments.parts:
                mine = [t for t in trajectories if t.env == part.name]
                if mine:
                    metrics.update(_numbers(f"val/{part.name}", summarize(mine)))
        return metrics


def _numbers(prefix: str, summary: dict[str, Any]) -> dict[str, float]:
    return {
        f"{prefix}/{key}": value
        for key, value in summary.items()
        if isinstance(value, (int, float)) and key != "generated_tokens"
    }
