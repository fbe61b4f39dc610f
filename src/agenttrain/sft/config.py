"""The `agenttrain sft` recipe."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from agenttrain.modeling import ModelConfig
from agenttrain.run.config import ResumeMode, RunConfig, Section
from agenttrain.sft.data import DataFormat


class RepeatConfig(Section):
    where: str | None = None
    """Task attributes of the conversations to repeat, e.g. `depth=1,ingredients>=2` (the
    environment's described attributes, as `agenttrain compare --by` names them)."""
    times: int = Field(2, ge=1)
    """Copies of each matching conversation; the rest of `limit` is a sample of the others."""


class SFTDataConfig(Section):
    train: list[Path] = Field(default_factory=list, description="JSONL files to train on")
    eval: list[Path] = Field(default_factory=list, description="held-out JSONL files")
    eval_fraction: float = Field(0.05, ge=0, lt=1)
    """Without `eval` files, this share of the training conversations is held out for eval loss."""
    format: DataFormat = "auto"
    env: str = "textcraft"
    """The environment the data is about: the test-split guard and after-training evaluation."""
    successful_only: bool = True
    """For trajectory files: train only on successful episodes (rejection sampling)."""
    max_length: int = Field(2048, ge=64)
    limit: int | None = Field(None, ge=1, description="use at most this many conversations")
    """A seeded random sample of that many, kept in file order: demonstration files are written
    in task order, which for TextCraft is easiest first, so the first N were all shallow goals."""
    system_prompt: str | None = None
    """The system prompt the trained policy will run with (`rollout.system_prompt`)."""
    repeat: RepeatConfig = Field(default_factory=RepeatConfig)
    """Every conversation of a rare kind of task, in several copies (sft/repeat.py): a
    seeded sample of 160 of TextCraft's 390 demonstrations holds 3 or 4 depth-1 goals of two
    ingredients."""


class OptimConfig(Section):
    lr: float = Field(2e-4, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    warmup_steps: int = Field(0, ge=0)
    lr_schedule: Literal["constant", "cosine", "linear"] = "cosine"
    epochs: float = Field(1.0, gt=0, description="fractions allowed, e.g. 0.5")
    batch_tokens: int = Field(8192, ge=64, description="trained-on sequence tokens per step")
    micro_batch_tokens: int = Field(1024, ge=64)
    packing: bool = False
    """Pack several conversations into one sequence (block-diagonal attention) instead of
    padding micro-batches."""
    grad_clip: float = Field(1.0, gt=0)


class SFTTrainerConfig(Section):
    save_freq: int = Field(50, ge=1)
    keep_checkpoints: int = Field(2, ge=1)
    eval_freq: int = Field(20, ge=1, description="steps between eval-loss measurements")
    stop_patience: int | None = Field(None, ge=1)
    """Stop once this many held-out loss measurements in a row (every `eval_freq` steps) did
    not beat the best by more than `stop_min_delta`; `optim.epochs` is then the most the run
    trains, and its schedule still spans them. None: train every epoch. Needs held-out
    examples (`data.eval` or `data.eval_fraction`)."""
    stop_min_delta: float = Field(0.0, ge=0)
    """How much lower than the best a held-out loss must be to count as an improvement."""
    resume: ResumeMode = "auto"
    loggers: list[Literal["console", "jsonl", "tensorboard", "wandb", "mlflow"]] = Field(
        default_factory=lambda: ["console", "jsonl", "tensorboard"]
    )


class AfterTrainingEval(Section):
    after_training: bool = True
    """Evaluate the final checkpoint on held-out tasks; the result goes into the report."""
    split: str = "val"
    tasks: list[int] | None = None
    n: int = Field(1, ge=1)
    temperature: float = Field(0.0, ge=0)
    max_turns: int | None = Field(None, ge=1)
    max_new_tokens: int = Field(128, ge=1)
    action_format: Literal["react", "adapt", "json", "raw"] = "react"
    """The format the training data uses: the model is asked for the same."""


class SFTConfig(Section):
    run: RunConfig = Field(default_factory=lambda: RunConfig(name="sft", out_dir=Path("runs/sft")))
    data: SFTDataConfig = Field(default_factory=SFTDataConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    trainer: SFTTrainerConfig = Field(default_factory=SFTTrainerConfig)
    eval: AfterTrainingEval = Field(default_factory=AfterTrainingEval)
