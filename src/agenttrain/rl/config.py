"""The `agenttrain train` recipe. Names follow verl where verl has one."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from agenttrain.launcher.config import LaunchConfig
from agenttrain.memory.config import MemoryConfig
from agenttrain.modeling import ModelConfig
from agenttrain.rl.kl import KLType
from agenttrain.rl.losses import AggMode
from agenttrain.rl.rollout_correction import CorrectionLevel
from agenttrain.rollout.engine import RolloutConfig
from agenttrain.run.config import ResumeMode, RunConfig, Section


class EnvConfig(Section):
    name: str = "textcraft"
    split: str = "train"
    val_split: str = "val"
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Constructor arguments of the in-process environment (`make_env(name, **kwargs)`)."""
    servers: list[str] = Field(default_factory=list, description="empty: in-process")
    token: str | None = None
    weight: int = Field(1, ge=1)
    """In a multi-environment run (`envs`): this environment's tasks per round of the mix."""
    max_turns: int | None = Field(None, ge=1)
    """This environment's turn limit (default: `rollout.max_turns`, else the environment's)."""
    action_format: Literal["react", "adapt", "json", "raw"] | None = None
    """This environment's action format (default: `rollout.action_format`)."""
    task_strata: list[str] = Field(default_factory=list)
    """Train only on the split's tasks of these difficulty classes (the environment's
    `task_stratum`, e.g. TextCraft's "depth 1"): a curriculum that keeps the groups where a
    small policy's rewards differ. Empty: every task. Validation still plays the whole split."""


class SamplingConfig(Section):
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=0)


FrontierTarget = Literal["success", "signal"]
"""What frontier sampling estimates per task: its success rate, or its groups' signal rate."""
FrontierKeep = Literal["all", "mixed"]
"""Which training tasks a screened run draws: all of them, or those its screening split."""
PenaltyGroups = Literal["all", "solved"]
"""Where a refusal penalty is charged: every group, or only groups with a success."""
PenaltyCap = Literal["none", "progress"]
"""How much the refusal penalties may take from a failure: all they charge, or its credit."""


class FrontierConfig(Section):
    """Frontier task sampling (`data.task_sampling: frontier`); see `rl/task_stats.py`."""

    target: FrontierTarget = "success"
    """success: prefer tasks solved about half the time (p(1 − p)); signal: prefer tasks whose
    groups most often had rewards that differ (counts partial credit for progress too)."""

    candidates: int = Field(4, ge=2)
    """Tasks each slot looks at in the uniform stream; it plays one of them."""
    prior_strength: float = Field(2.0, gt=0)
    """Pseudo-episodes of the Beta prior (mean: the run's success rate) behind each estimate."""
    floor: float = Field(0.02, gt=0)
    """Added to every priority so no task starves (p(1 − p) is at most 0.25)."""
    replay: int = Field(0, ge=0)
    """Tasks already played that join each slot's candidates: the `replay` known tasks of its
    environment with the highest priorities, not yet played in the step. The stream offers
    each task once a pass, so a run shorter than a pass (TextCraft depth 1 and 2, 10 steps of
    8 groups: 80 slots × 4 candidates, 310 tasks) never meets a task twice and its per-task
    counts never steer a pick; with replay a task whose group was mixed comes back while it
    still teaches. 0: off (each slot looks only at the stream)."""
    seed_from: list[Path] = Field(default_factory=list)
    """Episodes of the starting model on training tasks (`agenttrain eval --split train
    --model <start> -n 2`, its episodes.jsonl), counted into the per-task statistics before
    step 1: the first steps then pick tasks the model solves sometimes, instead of learning
    that from groups spent on hopeless ones. Training-split episodes only (checked)."""
    keep: FrontierKeep = "all"
    """all: every training task stays drawable; mixed: only the tasks whose `seed_from`
    episodes both succeeded and failed (pass-rate filtering: a task the starting model solved
    in all its screening samples, or in none, is dropped for the run). Screen with several
    samples a task (`-n 4`): with one, no task is mixed."""
    rescreen_every: int = Field(0, ge=0)
    """With keep=mixed: every `rescreen_every` steps the current policy plays every task of
    the run's pool (its training tasks before the filter) `rescreen_samples` times, and the
    tasks it now both solves and fails become the drawn set, their counts the statistics.
    A fixed kept set thins out as training solves it (TextCraft seed 0: informative share
    0.6 in steps 1-10, 0.25 by step 16) while goals screening never solved become
    reachable. 0: screen once, before step 1."""
    rescreen_samples: int = Field(4, ge=2)
    """Episodes per task in each re-screening (two at least: one cannot both solve and fail)."""

    @model_validator(mode="after")
    def _keep_needs_screening(self) -> FrontierConfig:
        if self.keep != "all" and not self.seed_from:
            raise ValueError(
                f"data.frontier.keep={self.keep} filters tasks by their screening episodes, "
                "but data.frontier.seed_from is empty: set it to the starting model's episodes "
                "on the training tasks (agenttrain eval --split train -n 4 ...)"
            )
        if self.rescreen_every and self.keep != "mixed":
            raise ValueError(
                "data.frontier.rescreen_every renews the tasks data.frontier.keep=mixed keeps; "
                f"keep is {self.keep}: set keep=mixed (with seed_from) or rescreen_every=0"
            )
        return self


class OracleStartConfig(Section):
    """Reverse curriculum (R3, Xi et al. 2024): episodes start part-way along the oracle's
    solution, so goals too deep to solve from scratch still end in mixed groups. Each group
    draws its share of the plan uniformly from [0, max_share), and max_share fades linearly to
    0 over `fade_steps` (0: no fade). Evaluation always starts from scratch."""

    max_share: float = Field(0.0, ge=0, lt=1)
    fade_steps: int = Field(0, ge=0)

    def share_cap(self, step: int) -> float:
        """The largest share a group may start from at `step` (steps count from 1)."""
        if not self.fade_steps:
            return self.max_share
        return self.max_share * max(0.0, 1 - (step - 1) / self.fade_steps)


class DataConfig(Section):
    batch_tasks: int = Field(8, ge=1, description="tasks per step (verl: train_batch_size)")
    group_size: int = Field(8, ge=1, description="episodes per task (verl: rollout.n)")
    task_sampling: Literal["uniform", "frontier"] = "uniform"
    """uniform: the per-epoch shuffled stream; frontier: favour tasks whose estimated success
    is neither 0 nor 1 (candidates drawn from that stream)."""
    frontier: FrontierConfig = Field(default_factory=FrontierConfig)
    oracle_start: OracleStartConfig = Field(default_factory=OracleStartConfig)

    @model_validator(mode="after")
    def _knobs_are_used(self) -> DataConfig:
        if self.task_sampling == "uniform" and self.frontier != FrontierConfig():
            raise ValueError(
                "data.frontier is set but data.task_sampling is uniform, which ignores it: "
                "set data.task_sampling=frontier (allowed: uniform, frontier)"
            )
        if self.oracle_start.fade_steps and not self.oracle_start.max_share:
            raise ValueError(
                "data.oracle_start.fade_steps is set but data.oracle_start.max_share is 0, so "
                "no episode starts after the oracle: set max_share (e.g. 0.75)"
            )
        return self


class KLConfig(Section):
    use_kl_loss: bool = False
    coef: float = Field(0.001, ge=0)
    type: KLType = "low_var_kl"
    in_reward: bool = False
    """Subtract β·KL(old ‖ ref) from the rewards instead of (or besides) the loss."""
    in_reward_type: KLType = "k1"
    adaptive: bool = False
    target: float = Field(6.0, gt=0)
    horizon: int = Field(10000, ge=1)


class FilterGroupsConfig(Section):
    enabled: bool = False
    """Dynamic sampling (DAPO): drop groups whose rewards have no variance (they teach nothing)
    and sample new groups until `data.batch_tasks` groups with variance are collected."""
    max_num_gen_batches: int = Field(4, ge=1)
    """At most this many generation rounds per step; a step that still has fewer informative
    groups trains on those it has (verl raises instead; the shortfall is logged)."""


GROUP_BASELINE_ESTIMATORS = ("grpo", "rloo", "reinforce_plus_plus_baseline", "gigpo")
"""Estimators whose baseline is the task's group: a group of one has none."""
NEEDS_GROUP = ("grpo", "rloo", "gigpo")
"""Estimators that cannot learn from groups of one (reinforce_plus_plus_baseline then falls back
to the batch-whitened score, as verl does)."""


class RolloutCorrectionConfig(Section):
    """Truncated importance sampling for the rollout/trainer probability gap
    (rl/rollout_correction.py; verl's `algorithm.rollout_correction`). Off by default."""

    level: CorrectionLevel | None = None
    """`token`: each token's ratio pi_train / pi_rollout; `sequence`: the episode's product."""
    threshold: float = Field(2.0, ge=1)
    """Weights above this are truncated to it (TIS; verl's default 2.0)."""


class TurnsStage(Section):
    until_step: int = Field(ge=1)
    max_turns: int = Field(ge=1)


GIGPO_DEFAULT_GAMMA = 0.95
"""verl-agent's discount for GiGPO: with γ = 1 and an outcome reward every turn of an
episode has the same return, so all-solved groups give no signal at all."""


class GiGPOConfig(Section):
    step_weight: float = Field(1.0, ge=0)
    """ω in A = A^E + ω·A^S: the weight of the step-level (same anchor state) advantage."""
    anchor: Literal["observation", "state"] = "observation"
    """What makes turns one step group: the observation they answered (the paper's choice,
    where it shows the state), or the environment's state after the actions so far
    (`EnvSpec.states`; TextCraft: the inventory, which its observations do not show)."""


class AlgorithmConfig(Section):
    adv_estimator: Literal[
        "grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "gigpo"
    ] = "grpo"
    norm_adv_by_std: bool = True
    """False gives Dr.GRPO (no division by the group's std; for gigpo, by either std)."""
    epsilon: float = Field(1e-6, gt=0)
    gamma: float = Field(1.0, ge=0, le=1)
    """The discount of reinforce_plus_plus and gigpo. Default 1, except with gigpo: 0.95
    (`GIGPO_DEFAULT_GAMMA`) unless set; an explicit 1 is kept (step groups then compare
    outcomes only, not path lengths)."""
    gigpo: GiGPOConfig = Field(default_factory=GiGPOConfig)
    return_at_env_tokens: Literal["carry", "restart"] = "carry"
    """reinforce_plus_plus only: what the discounted return does at environment tokens.
    `carry` (verl 0.9.1): passes through them unchanged (not discounted), so an outcome reward
    on the last reply reaches every earlier reply. `restart` (verl 0.7.1): restarts at 0, so it
    reaches only the last reply."""
    kl: KLConfig = Field(default_factory=KLConfig)
    filter_groups: FilterGroupsConfig = Field(default_factory=FilterGroupsConfig)
    rollout_correction: RolloutCorrectionConfig = Field(default_factory=RolloutCorrectionConfig)
    max_turns_schedule: list[TurnsStage] = Field(default_factory=list)
    """ScalingInter-RL curriculum: max turns by step, e.g. [{until_step: 10, max_turns: 5}]."""
    zero_variance_alpha: float = Field(0.0, ge=0)
    """RL-ZVP: groups whose rewards are all equal learn too, with advantages signed by their
    shared outcome and sized by token entropy times this (`rl/zero_variance.py`); 0: off,
    GRPO's zero advantage. Needs those groups in the batch: not with filter_groups."""

    @model_validator(mode="after")
    def _zero_variance_groups_kept(self) -> AlgorithmConfig:
        if self.zero_variance_alpha > 0 and self.filter_groups.enabled:
            raise ValueError(
                "algorithm.zero_variance_alpha learns from the groups whose rewards are all "
                "equal, which algorithm.filter_groups.enabled drops before the update: "
                "turn one of them off"
            )
        if self.zero_variance_alpha > 0 and self.adv_estimator not in ("grpo", "rloo"):
            raise ValueError(
                "algorithm.zero_variance_alpha shapes the zero advantages of outcome-level group "
                f"estimators (grpo, rloo), not {self.adv_estimator}"
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _gigpo_discounts(cls, data: Any) -> Any:
        """gigpo without an explicit gamma discounts (see `GIGPO_DEFAULT_GAMMA`)."""
        if isinstance(data, dict) and data.get("adv_estimator") == "gigpo" and "gamma" not in data:
            return {**data, "gamma": GIGPO_DEFAULT_GAMMA}
        return data


class DemoLossConfig(Section):
    """Supervised loss on demonstrations added to each policy update (InstructGPT's PPO-ptx,
    with demonstrations for pretraining text): it pulls the policy back towards behaviour GRPO's
    draws stop rewarding, e.g. the depth-2 crafting a depth-1-heavy stage unlearns."""

    coef: float = Field(0.0, ge=0)
    """Weight of the demonstrations' token-mean NLL beside the policy loss; 0: off."""
    data: list[Path] = Field(default_factory=list)
    """JSONL files in any format `agenttrain sft` reads (usually the SFT stage's own data)."""
    limit: int | None = Field(None, ge=1)
    """`agenttrain sft`'s `data.limit`: with the same `run.seed` it keeps the same seeded
    sample, so the loss sees exactly the SFT's conversations."""
    per_update: int = Field(16, ge=1)
    """Demonstrations in each optimizer step (a seeded sample, a pure function of seed, step
    and mini-batch)."""
    max_length: int = Field(2048, ge=16)

    @model_validator(mode="after")
    def _needs_data(self) -> DemoLossConfig:
        if self.coef > 0 and not self.data:
            raise ValueError(
                "actor.demo_loss.coef > 0 needs demonstrations: set actor.demo_loss.data "
                "(e.g. the SFT stage's JSONL)"
            )
        return self


class ActorConfig(Section):
    lr: float = Field(1e-5, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    warmup_steps: int = Field(0, ge=0)
    lr_schedule: Literal["constant", "cosine", "linear"] = "constant"
    ppo_epochs: int = Field(1, ge=1)
    mini_batch_episodes: int | None = Field(None, ge=1, description="default: the whole batch")
    micro_batch_tokens: int = Field(2048, ge=64, description="tokens per forward/backward")
    """Measured here: 2048 for short episodes, 1024 for ~1000-token TextCraft episodes (one
    episode per micro-batch: no padding) beat larger budgets in time and memory."""
    packing: bool = False
    """Lay a micro-batch's episodes end to end in one row instead of padding each to the
    longest (positions restart at each episode; transformers keeps them from attending to one
    another). For large micro-batches, on a GPU; on CPU one episode per micro-batch has no
    padding either."""
    clip_ratio_low: float = Field(0.2, ge=0)
    clip_ratio_high: float = Field(0.2, ge=0, description="0.28: DAPO clip-higher")
    clip_ratio_c: float = Field(3.0, gt=1, description="dual-clip constant")
    loss_agg_mode: AggMode = "token-mean"
    loss_scale_factor: int | None = Field(None, ge=1)
    """`seq-mean-token-sum-norm` (Dr.GRPO) divides by this constant; default:
    `rollout.max_context` (verl: the configured response length), never a per-step width."""
    entropy_coeff: float = Field(0.0, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    recompute_old_logprobs: bool = True
    """Recompute old log-probs with the training weights (verl's default) instead of using the
    rollout's (which may come from a bf16 generation copy)."""
    demo_loss: DemoLossConfig = Field(default_factory=DemoLossConfig)


class CustomRewardConfig(Section):
    path: Path | None = None
    name: str = "compute_score"
    kwargs: dict[str, object] = Field(default_factory=dict)


class RewardConfig(Section):
    custom_function: CustomRewardConfig = Field(default_factory=CustomRewardConfig)
    progress_weight: float = Field(0.0, ge=0, lt=1)
    """Partial credit in training: an unsolved episode scores this times the environment's
    progress (TextCraft: the share of the goal's intermediate items crafted), so groups on
    goals nobody solves yet can still differ. 0: success only. Evaluation always scores
    success only."""
    progress_fade_steps: int = Field(0, ge=0)
    """Steps over which the partial credit fades linearly to 0 (step s gets the weight times
    1 − (s − 1)/N; from step N + 1 on, success only). 0: the weight holds for the whole run."""

    format_penalty: float = Field(0.0, ge=0, lt=1)
    """Training only: an episode with a reply the action format could not parse (a reply cut
    off in a repetition loop, a missing `Action:`) scores this much less, solved or not, so a
    group whose failures differ only in format still teaches the format. 0: off. Evaluation
    always scores success only."""
    loop_penalty: float = Field(0.0, ge=0, lt=1)
    """Training only: an episode scores this much less times its share of looping turns
    (a turn that sends again, word for word, an action the environment just refused, such
    as a TextCraft craft tried again without fetching what it lacked), so a group of
    failures differs by how much of its budget each spent going nowhere. 0: off. Needs an
    environment that says which observations are refusals (TextCraft). Evaluation always
    scores success only."""
    recovery_penalty: float = Field(0.0, ge=0, lt=1)
    """Training only: an episode scores this much less times its share of unrecovered
    refusals: actions refused for something lacking (a TextCraft craft without its
    ingredients, a `get` of an item that must be crafted) whose next action did not go after
    what was lacking (fetched an ingredient already held, repeated the craft, ...). The loop
    penalty charges only the repeat; this one tells the right fetch from a wrong one. 0: off.
    Needs an environment that reports recoveries (TextCraft). Evaluation always scores
    success only."""
    loop_penalty_groups: PenaltyGroups = "all"
    """Where the loop penalty is charged. all: every group. solved: only groups in which
    some episode succeeded. In a group nobody solved, the refusal penalties rank the
    failures by how few refusals they met, and the fewest come from never crafting: a policy
    can learn to fetch and never craft (seen with `run.seed=1`, docs/results.md). With
    partial credit for progress on, crafting pays in every group, and keeping this one at
    all stops a repeated refused craft from coming back where nobody succeeds."""
    recovery_penalty_groups: PenaltyGroups = "all"
    """Where the recovery penalty is charged: all groups, or (solved) only groups in which
    some episode succeeded, for the reason given under `loop_penalty_groups`."""
    refusal_penalty_cap: PenaltyCap = "none"
    """How much the loop and recovery penalties may take from a failed episode. none: all
    they charge. progress: at most the partial credit it earned (`progress_weight` times its
    progress), so a failure that crafted and was refused never scores below one that did
    nothing, in any group, and never crafting stops being the safe move. The cost: a failure
    with no progress (every failed depth-1 TextCraft episode) pays no refusal penalty.
    Successes pay in full."""

    @model_validator(mode="after")
    def _fade_needs_a_weight(self) -> RewardConfig:
        if self.progress_fade_steps and not self.progress_weight:
            raise ValueError(
                "reward.progress_fade_steps is set but reward.progress_weight is 0, so there is "
                "no partial credit to fade: set reward.progress_weight (e.g. 0.5) or remove it"
            )
        return self

    @model_validator(mode="after")
    def _scope_needs_a_penalty(self) -> RewardConfig:
        for name in ("loop", "recovery"):
            scope = getattr(self, f"{name}_penalty_groups")
            if scope != "all" and not getattr(self, f"{name}_penalty"):
                raise ValueError(
                    f"reward.{name}_penalty_groups={scope} says where the {name} penalty is "
                    f"charged, but reward.{name}_penalty is 0: set it (e.g. 0.5) or remove "
                    f"reward.{name}_penalty_groups"
                )
        return self

    @model_validator(mode="after")
    def _cap_needs_credit_and_a_penalty(self) -> RewardConfig:
        if self.refusal_penalty_cap == "none":
            return self
        if not self.progress_weight:
            raise ValueError(
                "reward.refusal_penalty_cap=progress caps the refusal penalties at the partial "
                "credit an episode earned, but reward.progress_weight is 0, so every penalty "
                "would be capped at 0: set reward.progress_weight (e.g. 0.5)"
            )
        if not (self.loop_penalty or self.recovery_penalty):
            raise ValueError(
                "reward.refusal_penalty_cap=progress caps the loop and recovery penalties, but "
                "both are 0: set reward.loop_penalty or reward.recovery_penalty (e.g. 0.5)"
            )
        return self


class TrainerConfig(Section):
    total_steps: int = Field(20, ge=1)
    save_freq: int = Field(5, ge=1)
    keep_checkpoints: int = Field(2, ge=1)
    test_freq: int = Field(5, ge=0, description="0: no validation")
    val_tasks: int = Field(32, ge=1)
    val_n: int = Field(1, ge=1)
    val_temperature: float = Field(0.0, ge=0)
    val_before_train: bool = True
    resume: ResumeMode = "auto"
    """auto: continue from the run folder's last checkpoint if any; never; or a checkpoint path."""
    loggers: list[Literal["console", "jsonl", "tensorboard", "wandb", "mlflow"]] = Field(
        default_factory=lambda: ["console", "jsonl", "tensorboard"]
    )
    save_trajectories: bool = True
    max_env_error_rate: float = Field(0.5, ge=0, le=1)
    """A step that lost a larger share of its episodes to errors (environment or agent:
    `rollout/error_rate`) stops the run (exit status 3, that step not saved): going on would
    train on next to nothing."""


class TrainConfig(Section):
    run: RunConfig = Field(default_factory=RunConfig)
    env: EnvConfig = Field(default_factory=EnvConfig)
    envs: list[EnvConfig] = Field(default_factory=list)
    """Several environments in one run (`[textcraft, babyai]`, or entries with `weight`,
    `split`, `max_turns`, ...); replaces `env`."""
    model: ModelConfig = Field(default_factory=ModelConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    actor: ActorConfig = Field(default_factory=ActorConfig)
    reward: RewardConfig = Field(default_factory=RewardConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    """The experience pool (docs/memory.md)."""
    launch: LaunchConfig = Field(default_factory=LaunchConfig)
    """Read by `agenttrain launch` only: the services it starts for this run (docs/launch.md)."""

    @field_validator("envs", mode="before")
    @classmethod
    def _names_are_entries(cls, value: Any) -> Any:
        """`envs: [textcraft, babyai]` is short for entries with only a name."""
        if isinstance(value, list):
            return [{"name": item} if isinstance(item, str) else item for item in value]
        return value

    @property
    def environments(self) -> list[EnvConfig]:
        """The run's environments: `envs` when given, else `env`."""
        return list(self.envs) or [self.env]

    @model_validator(mode="after")
    def _consistent(self) -> TrainConfig:
        if self.envs and "env" in self.model_fields_set:
            raise ValueError("set either env (one environment) or envs (several), not both")
        names = [entry.name for entry in self.environments]
        if len(set(names)) != len(names):
            raise ValueError(f"envs lists an environment twice: {names}")
        episodes = self.data.batch_tasks * self.data.group_size
        mini = self.actor.mini_batch_episodes
        if mini is not None and mini > episodes:
            raise ValueError(
                f"actor.mini_batch_episodes={mini} exceeds the {episodes} episodes of a step "
                "(data.batch_tasks × data.group_size)"
            )
        estimator = self.algorithm.adv_estimator
        if estimator in NEEDS_GROUP and self.data.group_size < 2:
            raise ValueError(
                f"algorithm.adv_estimator={estimator} compares the episodes of a task's group and "
                f"cannot learn with data.group_size={self.data.group_size}: use data.group_size "
                ">= 2, or reinforce_plus_plus (batch-whitened returns, no group needed)"
            )
        if self.algorithm.filter_groups.enabled and self.data.group_size < 2:
            raise ValueError(
                "algorithm.filter_groups.enabled keeps groups whose rewards differ; with "
                "data.group_size=1 no group can, so nothing would be trained"
            )
        if self.memory.enabled:
            held_out = [e.name for e in self.environments if e.split != "train"]
            if held_out:
                raise ValueError(
                    f"memory.enabled: only train-split episodes may enter the experience pool, "
                    f"but {held_out[0]} trains on another split; use split train"
                )
        restart = self.algorithm.return_at_env_tokens == "restart"
        if restart and estimator != "reinforce_plus_plus":
            raise ValueError(
                "algorithm.return_at_env_tokens applies to reinforce_plus_plus only "
                f"(adv_estimator is {estimator})"
            )
        return self
