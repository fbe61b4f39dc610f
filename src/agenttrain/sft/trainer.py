"""Multi-turn SFT: token-mean cross-entropy on assistant tokens, in the trainer's run format.

Same run folder, checkpoints (so `agenttrain train model.path=<run>/checkpoints/step-N`
continues from them), metric loggers, Ctrl-C handling and exact resume as `agenttrain train`.
With `eval.after_training` the final checkpoint plays held-out tasks through the eval runner
and the result goes into the run's report.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

import torch
from rich.console import Console

from agenttrain.envs.registry import get_spec
from agenttrain.modeling import build_trainable
from agenttrain.policy.chat import ChatTemplate
from agenttrain.run import checkpoint
from agenttrain.run.runtime import (
    TrainingRun,
    lr_factor,
    step_progress,
)
from agenttrain.run.tracking import device_memory
from agenttrain.sft.batching import plan_steps
from agenttrain.sft.config import SFTConfig
from agenttrain.sft.data import (
    DataError,
    hold_out,
    limit_seed,
    read_conversations,
    sample_limit,
)
from agenttrain.sft.early_stop import HeldOutStop
from agenttrain.sft.guard import HeldOutGuard
from agenttrain.sft.loss import nll_sums
from agenttrain.sft.repeat import with_repeats
from agenttrain.sft.report import write_sft_report
from agenttrain.sft.tokenize import Example, long_replies, tokenize


class SFTTrainer(TrainingRun):
    config: SFTConfig

    def __init__(
        self,
        config: SFTConfig,
        console: Console | None = None,
        allow_config_change: bool = False,
        generation_limit: int | None = None,
    ) -> None:
        """`generation_limit`: the new-token limit the trained model will generate with
        (default `eval.max_new_tokens`); replies longer than it are warned about."""
        self._open_run(config, console)
        self.generation_limit = generation_limit or config.eval.max_new_tokens
        self._set_up_run(allow_config_change)
        source = self.resume_from / "model" if self.resume_from else None
        self.model, self.tokenizer = build_trainable(config.model, source, config.run.seed)
        self.template = ChatTemplate(self.tokenizer, config.data.system_prompt)
        self.pad_id = self.tokenizer.pad_token_id
        if self.pad_id is None:
            self.pad_id = self.tokenizer.eos_token_id or 0
        self.repeat_note = ""
        self.train_examples, self.eval_examples = self._load_data()
        if config.trainer.stop_patience is not None and not self.eval_examples:
            raise DataError(
                "trainer.stop_patience stops on the held-out loss, and this run holds out no "
                "example: set data.eval_fraction (e.g. 0.05) or data.eval"
            )
        self.steps = plan_steps(
            [len(e.ids) for e in self.train_examples],
            config.optim.epochs,
            config.optim.batch_tokens,
            config.run.seed,
        )
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            self.params, lr=config.optim.lr, weight_decay=config.optim.weight_decay
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lr_factor)
        self.step = 0
        self.held_out = HeldOutStop(config.trainer.stop_patience, config.trainer.stop_min_delta)
        if self.resume_from is not None:
            state = self._restore_training(self.resume_from)
            self.held_out.restore(state.get("held_out"))
        self.eval_summary: dict[str, Any] | None = None

    @property
    def total_steps(self) -> int:
        return len(self.steps)

    # -- data ---------------------------------------------------------------------------------

    def _load_data(self) -> tuple[list[Example], list[Example]]:
        """Tokenized training and held-out examples, after the test-split guard saw them all."""
        data = self.config.data
        if not data.train:
            raise DataError("data.train is empty: name at least one JSONL file")
        guard = HeldOutGuard(data.env)

        def read(paths: list[Path]) -> list[Any]:
            conversations = [
                c
                for path in paths
                for c in read_conversations(Path(path), data.format, data.successful_only)
            ]
            for conversation in conversations:
                guard.check(conversation)
            return conversations

        seed = self.config.run.seed
        train = self._mix(read(data.train))
        held_out = read(data.eval)
        if not held_out and data.eval_fraction > 0 and len(train) > 1:
            held_out, train = hold_out(train, data.eval_fraction, f"{seed}/sft/holdout")
        if not train:
            raise DataError(f"no trainable conversations in {', '.join(map(str, data.train))}")

        def encode(conversations: list[Any]) -> list[Example]:
            examples = [tokenize(c, self.template, data.max_length) for c in conversations]
            return [e for e in examples if e is not None]

        return encode(train), encode(held_out)

    def _mix(self, pool: list[Any]) -> list[Any]:
        """The conversations trained on: `data.limit`'s seeded sample of `pool`, with every
        conversation `data.repeat.where` matches in `data.repeat.times` copies."""
        data, seed = self.config.data, self.config.run.seed
        sample = sample_limit(pool, data.limit, limit_seed(seed))
        if not data.repeat.where:
            return sample
        describe = get_spec(data.env).describe
        if describe is None:
            raise DataError(
                f"data.repeat.where: {data.env} does not describe its tasks (those that do "
                "set describe in their spec, e.g. textcraft)"
            )
        mixed, matched = with_repeats(
            pool, sample, data.repeat.where, data.repeat.times, data.limit, describe, str(seed)
        )
        self.repeat_note = (
            f"; {matched} conversations where {data.repeat.where}, x{data.repeat.times} each"
        )
        return mixed

    def describe_data(self) -> str:
        tokens = sum(len(e.ids) for e in self.train_examples)
        trained = sum(e.trained_tokens for e in self.train_examples)
        truncated = sum(e.truncated for e in self.train_examples)
        return (
            f"{len(self.train_examples)} training conversations ({tokens} tokens, {trained} "
            f"trained on{f', {truncated} truncated' if truncated else ''}); "
            f"{len(self.eval_examples)} held out; {self.total_steps} steps{self.repeat_note}"
        )

    # -- optimisation -----------------------------------------------------------------------

    def _lr_factor(self, step: int) -> float:
        optim = self.config.optim
        return lr_factor(step, len(self.steps), optim.warmup_steps, optim.lr_schedule)

    def _loss_sums(self, examples: list[Example], train: bool) -> tuple[float, int]:
        """(summed token NLL, trained tokens) over examples; with `train`, gradients of the
        token-mean loss over all of them accumulate."""
        optim = self.config.optim
        return nll_sums(
            self.model,
            examples,
            self.config.model,
            optim.micro_batch_tokens,
            optim.packing,
            self.pad_id,
            backward_scale=1.0 if train else None,
        )

    def train_step(self, step: int) -> dict[str, float]:
        started = time.perf_counter()
        examples = [self.train_examples[i] for i in self.steps[step - 1]]
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum, tokens = self._loss_sums(examples, train=True)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.config.optim.grad_clip)
        finite = bool(torch.isfinite(grad_norm))
        if finite:  # a NaN/inf gradient would poison the weights and Adam's moments for good
            self.optimizer.step()
        lr = self.scheduler.get_last_lr()[0]
        with warnings.catch_warnings():  # a skipped step still advances the schedule
            warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step")
            self.scheduler.step()
        elapsed = time.perf_counter() - started
        sequence_tokens = sum(len(e.ids) for e in examples)
        return {
            "train/loss": loss_sum / max(tokens, 1),
            "train/grad_norm": float(grad_norm),
            "train/skipped_updates": 0.0 if finite else 1.0,
            "train/lr": lr,
            "train/conversations": len(examples),
            "train/trained_tokens": tokens,
            "train/epoch": self._epoch_at(step),
            "timing_s/step": elapsed,
            "perf/tokens_per_s": sequence_tokens / max(elapsed, 1e-9),
            **device_memory(self.device),
        }

    def _epoch_at(self, step: int) -> float:
        done = sum(len(s) for s in self.steps[:step])
        return done / max(1, len(self.train_examples))

    def eval_loss(self) -> dict[str, float]:
        if not self.eval_examples:
            return {}
        self.model.eval()
        try:
            loss_sum, tokens = self._loss_sums(self.eval_examples, train=False)
        finally:
            self.model.train()
        return {"eval/loss": loss_sum / max(tokens, 1)}

    # -- the loop ---------------------------------------------------------------------------

    def _train(self) -> Path:
        config = self.config
        tracker = self._start_training(preamble=self.describe_data())
        too_long = long_replies(self.train_examples, self.generation_limit)
        if too_long:
            self.console.print(f"[yellow]{too_long}[/]")
        last_saved = self.step if self.resume_from else None
        try:
            with step_progress(self.console) as progress:
                bar = progress.add_task(
                    "sft", total=self.total_steps, completed=self.step, status=""
                )
                if self.step == 0:
                    tracker.log(self._held_out_loss(), 0)
                while self.step < self.total_steps and not self._should_stop():
                    self.step += 1
                    metrics = self.train_step(self.step)
                    last = self.step == self.total_steps
                    if self.step % config.trainer.eval_freq == 0 or last:
                        metrics.update(self._held_out_loss())
                    tracker.log(metrics, self.step)
                    status = f"loss {metrics['train/loss']:.3f}"
                    if "eval/loss" in metrics:
                        status += f" · eval {metrics['eval/loss']:.3f}"
                    progress.update(bar, advance=1, status=status)
                    if self.step % config.trainer.save_freq == 0 or self.stop_requested:
                        self.save()
                        last_saved = self.step
            if last_saved != self.step:
                self.save()
        finally:
            self.stop.restore()
            tracker.close()
        stopped = self.held_out.note(self.step, self.total_steps) if self.held_out.reached else None
        if stopped:
            self.console.print(stopped)
        if not self.stop_requested and config.eval.after_training:
            self.evaluate_final()
        report = write_sft_report(self.run_dir, config, self.eval_summary, stopped)
        self.finish(report, self.eval_summary)
        return self.run_dir

    def _held_out_loss(self) -> dict[str, float]:
        """The held-out loss, counted toward `trainer.stop_patience`."""
        metrics = self.eval_loss()
        if "eval/loss" in metrics:
            self.held_out.observe(metrics["eval/loss"], self.step)
        return metrics

    def _should_stop(self) -> bool:
        return self.stop_requested or self.held_out.reached

    def save(self) -> Path:
        generation = {
            "env": self.config.data.env,
            "action_format": self.config.eval.action_format,
            "max_new_tokens": self.config.eval.max_new_tokens,
            "max_turns": self.config.eval.max_turns,
            "max_context": self.config.data.max_length,
            "system_prompt": self.config.data.system_prompt,
        }
        return self._save_checkpoint({"held_out": self.held_out.state()}, generation)

    def evaluate_final(self) -> dict[str, Any]:
        """Play held-out tasks with the final checkpoint (eval runner, report in `eval/`)."""
        from agenttrain.envs import get_spec
        from agenttrain.eval.report import write_report
        from agenttrain.eval.runner import EvalConfig, evaluate
        from agenttrain.rollout.engine import RolloutConfig

        settings = self.config.eval
        final = checkpoint.latest(self.run_dir)
        eval_config = EvalConfig(
            env=self.config.data.env,
            split=settings.split,
            tasks=settings.tasks,
            models=[str(final)],
            n=settings.n,
            seeds=[self.config.run.seed],
            temperature=settings.temperature,
            rollout=RolloutConfig(
                max_turns=settings.max_turns,
                max_new_tokens=settings.max_new_tokens,
                action_format=settings.action_format,
                system_prompt=self.config.data.system_prompt,
            ),
            device=self.config.model.device,
            out=self.run_dir / "eval",
            replace=True,  # the run's own evaluation of its final checkpoint, made afresh
        )
        self.console.print(f"[bold]evaluating the final checkpoint on {settings.split}[/]")
        results = evaluate(eval_config, self.console)
        write_report(
            eval_config.out,
            results,
            eval_config,
            f"agenttrain sft {self.run_dir}/config.yaml (eval.after_training)",
            get_spec(eval_config.env).breakdown_key,
        )
        self.eval_summary = results[0].summary
        return self.eval_summary
