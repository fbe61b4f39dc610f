"""The recipe's settings: its stages (demonstrations, SFT, screening, GRPO, the RFT
baseline) and the evaluation every stage's model gets; and how command-line overrides compose
with a file's."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, model_validator

from agenttrain import config as config_io
from agenttrain.rl.config import FrontierKeep
from agenttrain.run.config import RunConfig, Section
from agenttrain.sft.demos import (
    check_ingredients,
    check_quotes,
    check_recovery,
    check_todo,
    other_rewrites,
)

Positions = Annotated[
    list[int] | str | None, BeforeValidator(lambda v: str(v) if isinstance(v, int) else v)
]
"""Split positions: a list, or ranges such as "0-39" (a single number, `eval.tasks=7`, too)."""


def positions(tasks: list[int] | str | None) -> list[int] | None:
    """A `Positions` setting as a list (None stays None: the stage's default)."""
    from agenttrain.eval.runner import parse_ranges

    return parse_ranges(tasks) if isinstance(tasks, str) else tasks


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
    still_needed: bool = False
    """Each `get` and craft thought ends with what the item it works toward still needs
    (TextCraft; `agenttrain demos --still-needed`)."""
    todo: bool = False
    """Replies fetch every ingredient with `get` before they know it is crafted and carry a
    to-do list (TextCraft; `agenttrain demos --todo`); with `recovery`, a share of them sends
    a craft too early and recovers; not with the other rewrites above."""

    @model_validator(mode="after")
    def _recovery_exists(self) -> DemosStage:
        if self.recovery:
            check_recovery(self.env, self.recovery_style, self.action_format, self.recovery_from)
        if self.quote_recipes:
            check_quotes(self.env, self.action_format)
        if self.quote_ingredients:
            check_ingredients(self.quote_recipes)
        if self.still_needed:
            check_quotes(self.env, self.action_format, "--still-needed")
        if self.todo:
            others = other_rewrites(
                self.recovery_from, self.recovery_style, self.quote_recipes, self.still_needed
            )
            check_todo(self.env, self.action_format, others)
        return self


class TrainingStage(Section):
    config: Path
    overrides: list[str] = Field(default_factory=list)


class SFTStage(TrainingStage):
    checkpoint: str | None = None
    """Start from this model instead of training one: a checkpoint or run folder, e.g.
    another recipe's `runs/<name>/sft` (its newest checkpoint). Branches GRPO arms from one
    SFT into folders of their own. The SFT config still gives the base model, the device and
    the demonstration loss's sample; the demonstrations are this recipe's own."""


class RecipeEval(Section):
    split: str = "test"
    tasks: Positions = None
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
    """Episodes played at once (`agenttrain eval --concurrency`), here and in screening and
    RFT's sampling. A GPU decodes 128 rows about as fast per step as 32, so the GPU recipe
    raises it."""
    workers: int = Field(2, ge=1)
    """Processes playing each evaluation (and screening) at once on a CPU, each with its share
    of the threads (`agenttrain eval --workers`): 2 on 2 cores play about twice the episodes
    an hour of 1. Ignored on a GPU."""


class RFTStage(Section):
    """Rejection-sampling fine-tuning, the simplest alternative GRPO has to beat: the SFT
    model plays training tasks, and SFT continues from its checkpoint on the episodes it
    solved. Off by default (it adds a sampling pass and a fourth evaluation)."""

    enabled: bool = False
    tasks: Positions = None
    """Training-split positions to sample (a list, or ranges such as "0-63"); default: the
    tasks the GRPO stage played, so that both spend their samples on the same tasks."""
    n: int | None = Field(None, ge=1)
    """Samples per task; default: GRPO's group size."""
    temperature: float = Field(0.6, ge=0)
    max_turns: int | None = Field(10, ge=1)
    max_new_tokens: int = Field(96, ge=1)
    overrides: list[str] = Field(default_factory=list)
    """Overrides of the SFT config for the continued fine-tuning (e.g. optim.lr=5e-4)."""


class ScreenStage(Section):
    """Screening before GRPO (`data.frontier.seed_from`, docs/training.md): the SFT model
    plays the training tasks GRPO can draw, and GRPO samples its tasks by frontier, counting
    those episodes before its first step, so its first draws already prefer goals the model
    solves sometimes. Off by default (it adds a pass over the training tasks)."""

    enabled: bool = False
    tasks: Positions = None
    """Training-split positions to play (a list, or ranges such as "0-309"); default: every
    task GRPO can draw (those of its `env.task_strata`)."""
    n: int = Field(1, ge=1)
    """Samples per task."""
    keep: FrontierKeep = "all"
    """mixed: GRPO draws only the tasks screening both solved and failed
    (`data.frontier.keep`); needs `n` ≥ 2."""
    temperature: float | None = Field(None, ge=0)
    """Default: the GRPO stage's sampling temperature (screening estimates what GRPO sees)."""
    max_turns: int | None = Field(None, ge=1)
    """Default: the GRPO stage's turn limit."""
    max_new_tokens: int | None = Field(None, ge=1)
    """Default: the GRPO stage's `rollout.max_new_tokens`."""

    @model_validator(mode="after")
    def _keep_is_usable(self) -> ScreenStage:
        if self.keep == "mixed" and not self.enabled:
            raise ValueError("screen.keep=mixed filters by screening: set screen.enabled=true")
        if self.keep == "mixed" and self.n < 2:
            raise ValueError(
                "screen.keep=mixed keeps the tasks screening both solved and failed, which one "
                "sample a task never shows: set screen.n=4 (or at least 2)"
            )
        return self


class RecipeConfig(Section):
    run: RunConfig = Field(
        default_factory=lambda: RunConfig(
            name="textcraft-recipe", out_dir=Path("runs/textcraft-recipe")
        )
    )
    demos: DemosStage = Field(default_factory=DemosStage)
    sft: SFTStage = Field(
        default_factory=lambda: SFTStage(config=Path("configs/textcraft_sft.yaml"))
    )
    grpo: TrainingStage = Field(
        default_factory=lambda: TrainingStage(config=Path("configs/textcraft_grpo.yaml"))
    )
    rft: RFTStage = Field(default_factory=RFTStage)
    screen: ScreenStage = Field(default_factory=ScreenStage)
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
