"""Our training recipe (`TrainConfig`) as Hydra overrides of verl's `main_ppo` (verl 0.9.1).

Every leaf key of `TrainConfig` is either mapped (to verl keys, the agent loop's settings or
the data files) or reported as unsupported with the reason; nothing is dropped silently.
Values verl defaults differently (weight decay 0.01, `top_k` -1, the Dr.GRPO scale factor, the
rollout's tensor parallelism 2) are set explicitly so the run means the same thing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from agenttrain.integrations.verl.settings import AGENT_NAME, LoopSettings
from agenttrain.policy.models import ModelSpec, in_local_cache, resolve
from agenttrain.rl.config import TrainConfig

ACTOR = "actor_rollout_ref.actor"
ROLLOUT = "actor_rollout_ref.rollout"
MODEL = "actor_rollout_ref.model"
RUN_ENV = "+ray_kwargs.ray_init.runtime_env.env_vars"
"""Environment variables of every Ray worker (verl's file and TensorBoard loggers read them)."""

LOGGERS = {
    "console": "console",
    "jsonl": "file",
    "tensorboard": "tensorboard",
    "wandb": "wandb",
    "mlflow": "mlflow",
}
DTYPES = {"auto": "bfloat16", "bfloat16": "bfloat16", "float32": "float32"}
"""Our precisions in verl's names; `auto` is bf16 on the accelerators verl runs on."""
VERL_GRPO_EPSILON = 1e-6
_PLAIN = re.compile(r"[A-Za-z0-9_./:+\-]+")


@dataclass(frozen=True)
class Unsupported:
    key: str
    value: Any
    reason: str
    matters: bool
    """Whether this value makes a verl run differ from ours (False: verl does the same)."""


@dataclass
class Overrides:
    """What `python -m verl.trainer.main_ppo` needs to run our recipe."""

    args: list[str] = field(default_factory=list)
    """`key=value` Hydra overrides, in order."""
    mapped: dict[str, list[str]] = field(default_factory=dict)
    """Our key -> where it went: verl keys, `loop.<setting>` or `data:<what>`."""
    unsupported: list[Unsupported] = field(default_factory=list)
    loop: LoopSettings = field(default_factory=LoopSettings)
    """The agent loop's settings (its entry in `agent_loop_config_path`)."""
    notes: list[str] = field(default_factory=list)
    """Where a mapped key means something slightly different in verl."""

    def set(self, ours: str | None, key: str, value: Any) -> None:
        """Add `key=value`, recorded as where `ours` went (None: a setting of the launch)."""
        self.args.append(f"{key}={hydra_value(value)}")
        if ours is not None:
            self.mapped.setdefault(ours, []).append(key)

    def into(self, ours: str, where: str) -> None:
        self.mapped.setdefault(ours, []).append(where)

    def unsupported_key(self, ours: str, value: Any, reason: str, matters: bool) -> None:
        self.unsupported.append(Unsupported(ours, value, reason, matters))


def hydra_value(value: Any) -> str:
    """A value in Hydra's override grammar (strings quoted unless plainly safe)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(hydra_value(item) for item in value) + "]"
    if isinstance(value, dict):
        items = ",".join(f"{key}:{hydra_value(item)}" for key, item in value.items())
        return "{" + items + "}"
    text = str(value)
    if _PLAIN.fullmatch(text) and text not in ("null", "true", "false"):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def verl_overrides(
    config: TrainConfig,
    *,
    train_files: Sequence[Path],
    val_files: Sequence[Path],
    loop_config_path: Path,
    n_gpus_per_node: int = 1,
    nnodes: int = 1,
    prompt_length: int | None = None,
) -> Overrides:
    """The overrides that reproduce `config` on verl, with `nnodes` x `n_gpus_per_node` GPUs.

    `prompt_length` is verl's budget for the conversation start plus the first observation
    (verl left-truncates longer prompts); the rest of `rollout.max_context` is the response
    budget. Default: 1024 tokens, at most half the context.
    """
    out = Overrides()
    _launch(out, train_files, val_files, loop_config_path, n_gpus_per_node, nnodes)
    _run(out, config)
    _environment(out, config)
    _model(out, config)
    _rollout(out, config, prompt_length)
    _algorithm(out, config)
    _actor(out, config)
    _reward(out, config)
    _trainer(out, config)
    _launcher_settings(out, config)
    _memory_settings(out, config)
    return out


def _launch(
    out: Overrides,
    train: Sequence[Path],
    val: Sequence[Path],
    loop_path: Path,
    gpus: int,
    nodes: int,
) -> None:
    """What the launch decides: data files, the agent loop, the cluster, the rollout engine."""
    out.set(None, "data.train_files", [str(path.resolve()) for path in train])
    out.set(None, "data.val_files", [str(path.resolve()) for path in val])
    out.set(None, f"{ROLLOUT}.agent.agent_loop_config_path", str(loop_path.resolve()))
    out.set(None, f"{ROLLOUT}.agent.default_agent_loop", AGENT_NAME)
    out.set(None, f"{ROLLOUT}.name", "vllm")
    out.set(None, f"{ROLLOUT}.tensor_model_parallel_size", 1)
    out.set(None, "trainer.nnodes", nodes)
    out.set(None, "trainer.n_gpus_per_node", gpus)
    out.set(None, "trainer.project_name", "agenttrain")


def _run(out: Overrides, config: TrainConfig) -> None:
    run = config.run
    folder = run.out_dir.resolve()
    out.set("run.name", "trainer.experiment_name", run.name)
    out.set("run.out_dir", "trainer.default_local_dir", str(folder / "checkpoints"))
    for key in ("data.seed", f"{ROLLOUT}.seed", f"{ACTOR}.data_loader_seed"):
        out.set("run.seed", key, run.seed)


def _environment(out: Overrides, config: TrainConfig) -> None:
    """The run's environments (`env`, or each of `envs`): one data file per environment and
    split, their servers and constructor arguments in the loop's settings."""
    entries = config.environments
    for key in ("env.name", "env.split", "envs"):
        out.into(key, "data.train_files")
    for key in ("env.name", "env.val_split", "envs"):
        out.into(key, "data.val_files")
    out.loop.env_kwargs = {e.name: dict(e.kwargs) for e in entries if e.kwargs}
    out.into("env.kwargs", "loop.env_kwargs")
    out.loop.servers = {e.name: list(e.servers) for e in entries if e.servers}
    out.into("env.servers", "loop.servers")
    out.loop.token = _one_value("env.token", [e.token for e in entries if e.servers])
    out.into("env.token", "loop.token")
    strata = [e.task_strata for e in entries]
    out.unsupported_key(
        "env.task_strata",
        strata if config.envs else strata[0],
        "verl trains on every task of the exported split (difficulty classes are agenttrain's "
        "trainer only)",
        matters=any(strata),
    )
    weights = [e.weight for e in entries]
    out.unsupported_key(
        "env.weight",
        weights if config.envs else weights[0],
        "verl samples rows uniformly from all data files",
        matters=len(set(weights)) > 1,
    )


def _one_value(key: str, values: list[Any]) -> Any:
    """The one value every environment shares (None if there is none): the agent loop's
    settings hold one for all environments."""
    distinct = list(dict.fromkeys(values))
    if len(distinct) > 1:
        raise ValueError(
            f"{key} differs between environments ({distinct}); verl's agent loop takes one "
            "value for all of them: run one verl job per value"
        )
    return distinct[0] if distinct else None


def _model(out: Overrides, config: TrainConfig) -> None:
    model = config.model
    spec = resolve(model.path)
    if spec.kind != "hf" or spec.path is None:
        raise ValueError(
            f"model.path={model.path!r}: verl trains a local Hugging Face model folder "
            "(or an agenttrain checkpoint of one)"
        )
    lora = model.lora
    if spec.base is not None:
        _adapter_start(out, config, spec)
    else:
        out.set("model.path", f"{MODEL}.path", str(spec.path.resolve()))
        out.set("model.lora.enabled", f"{MODEL}.lora_rank", lora.rank if lora.enabled else 0)
        out.into("model.lora.rank", f"{MODEL}.lora_rank")
        out.set("model.lora.alpha", f"{MODEL}.lora_alpha", lora.alpha)
        out.set("model.lora.target_modules", f"{MODEL}.target_modules", lora.target_modules)
    _note_machine_local(out, spec.base or spec.path)
    if lora.enabled:
        out.set("model.lora.enabled", f"{ROLLOUT}.load_format", "safetensors")
    out.unsupported_key(
        "model.lora.dropout",
        lora.dropout,
        "verl's FSDP LoRA has no dropout (0)",
        matters=lora.enabled and lora.dropout > 0,
    )
    out.unsupported_key(
        "model.device",
        model.device,
        "verl trains on its GPUs",
        matters=False,
    )
    out.unsupported_key(
        "model.decode",
        model.decode,
        "verl generates with its own rollout engine (vLLM/SGLang)",
        matters=False,
    )
    out.unsupported_key(
        "model.draft_tokens",
        model.draft_tokens,
        "verl generates with its own rollout engine (vLLM/SGLang)",
        matters=False,
    )
    out.set("model.generation_dtype", f"{ROLLOUT}.dtype", DTYPES[model.generation_dtype])
    for section in ("actor", "ref"):
        key = f"actor_rollout_ref.{section}.fsdp_config.dtype"
        out.set("model.train_dtype", key, DTYPES[model.train_dtype])
    out.set(
        "model.gradient_checkpointing",
        f"{MODEL}.enable_gradient_checkpointing",
        model.gradient_checkpointing,
    )


def _note_machine_local(out: Overrides, base: Path) -> None:
    """The base model converted into this machine's cache is not on a cluster's nodes."""
    if in_local_cache(base):
        out.notes.append(
            f"the base model is this machine's converted copy ({base.resolve()}); a cluster's "
            f"nodes need their own: add --verl {MODEL}.path=<a Hub id or a path they share>"
        )


def _adapter_start(out: Overrides, config: TrainConfig, spec: ModelSpec) -> None:
    """A LoRA checkpoint (e.g. an SFT run): verl loads it on its base and keeps training it,
    with the adapter's own rank, alpha and target modules."""
    assert spec.path is not None and spec.base is not None
    if not config.model.lora.enabled:
        raise ValueError(
            f"model.path={config.model.path!r} is a LoRA checkpoint and model.lora.enabled is "
            "false (full fine-tuning of the merged model), which verl cannot do from an adapter: "
            f"merge it first (agenttrain export {config.model.path} --out DIR --merge-lora) "
            "and set model.path=DIR"
        )
    adapter = json.loads((spec.path / "adapter_config.json").read_text())
    out.set("model.path", f"{MODEL}.path", str(spec.base.resolve()))
    out.set("model.path", f"{MODEL}.lora_adapter_path", str(spec.path.resolve()))
    out.set("model.path", f"{MODEL}.lora_rank", int(adapter["r"]))
    out.set("model.path", f"{MODEL}.lora_alpha", int(adapter["lora_alpha"]))
    reason = "a LoRA checkpoint keeps its own shape (adapter_config.json)"
    lora = config.model.lora
    out.into("model.lora.enabled", f"{MODEL}.lora_adapter_path")
    kl = config.algorithm.kl
    if kl.use_kl_loss or kl.in_reward:
        out.notes.append(
            "algorithm.kl: verl's KL reference for a LoRA run is the base model with the adapter "
            f"switched off, not the starting adapter {spec.path} (ours)"
        )
    for key, value in (
        ("rank", lora.rank),
        ("alpha", lora.alpha),
        ("target_modules", lora.target_modules),
    ):
        out.unsupported_key(f"model.lora.{key}", value, reason, matters=False)


def _rollout(out: Overrides, config: TrainConfig, prompt_length: int | None) -> None:
    rollout, sampling = config.rollout, config.sampling
    context = rollout.max_context
    prompt = prompt_length if prompt_length is not None else min(1024, context // 2)
    if not 0 < prompt < context:
        raise ValueError(
            f"prompt length {prompt} must be below rollout.max_context={context} "
            "(verl's response budget is the difference)"
        )
    out.set("rollout.max_context", "data.max_prompt_length", prompt)
    out.set("rollout.max_context", "data.max_response_length", context - prompt)
    for name in ("max_new_tokens", "env_timeout_s", "max_format_errors", "reward"):
        setattr(out.loop, name, getattr(rollout, name))
        out.into(f"rollout.{name}", f"loop.{name}")
    entries = config.environments
    out.loop.max_turns = _one_value(
        "env.max_turns", [e.max_turns or rollout.max_turns for e in entries]
    )
    out.loop.action_format = _one_value(
        "env.action_format", [e.action_format or rollout.action_format for e in entries]
    )
    for key in ("rollout.max_turns", "env.max_turns"):
        out.into(key, "loop.max_turns")
    for key in ("rollout.action_format", "env.action_format"):
        out.into(key, "loop.action_format")
        out.into(key, "data:prompt")
    out.into("rollout.prompt_style", "data:prompt")
    out.into("rollout.system_prompt", "data:prompt")
    out.unsupported_key(
        "rollout.max_in_flight",
        rollout.max_in_flight,
        "verl plays a whole batch at once",
        matters=False,
    )
    out.unsupported_key(
        "rollout.batch_wait_s",
        rollout.batch_wait_s,
        "vLLM batches requests continuously",
        matters=False,
    )
    out.set("sampling.temperature", f"{ROLLOUT}.temperature", sampling.temperature)
    out.set("sampling.top_p", f"{ROLLOUT}.top_p", sampling.top_p)
    out.set("sampling.top_k", f"{ROLLOUT}.top_k", sampling.top_k or -1)
    out.set("data.batch_tasks", "data.train_batch_size", config.data.batch_tasks)
    out.set("data.group_size", f"{ROLLOUT}.n", config.data.group_size)
    frontier = config.data.task_sampling == "frontier"
    out.unsupported_key(
        "data.task_sampling",
        config.data.task_sampling,
        "verl's dataloader draws tasks uniformly (frontier sampling is agenttrain's trainer only)",
        matters=frontier,
    )
    for key, value in config.data.frontier.model_dump().items():
        out.unsupported_key(
            f"data.frontier.{key}", value, "frontier sampling is agenttrain's trainer only", False
        )
    start = config.data.oracle_start
    for key, value in start.model_dump().items():
        out.unsupported_key(
            f"data.oracle_start.{key}",
            value,
            "oracle starts (the oracle plays the first turns) are agenttrain's trainer only",
            matters=start.max_share > 0,
        )


def _algorithm(out: Overrides, config: TrainConfig) -> None:
    algorithm = config.algorithm
    kl = algorithm.kl
    if algorithm.adv_estimator == "gigpo":
        raise ValueError(
            "algorithm.adv_estimator=gigpo: verl 0.9.1 has no GiGPO (verl-agent's fork does) "
            "and its agent loop records no anchor states; train GiGPO with `agenttrain train`"
        )
    out.set("algorithm.adv_estimator", "algorithm.adv_estimator", algorithm.adv_estimator)
    out.set(
        "algorithm.norm_adv_by_std", "algorithm.norm_adv_by_std_in_grpo", algorithm.norm_adv_by_std
    )
    out.set("algorithm.gamma", "algorithm.gamma", algorithm.gamma)
    out.set("algorithm.kl.use_kl_loss", f"{ACTOR}.use_kl_loss", kl.use_kl_loss)
    out.set("algorithm.kl.coef", f"{ACTOR}.kl_loss_coef", kl.coef)
    out.set("algorithm.kl.type", f"{ACTOR}.kl_loss_type", kl.type)
    out.set("algorithm.kl.in_reward", "algorithm.use_kl_in_reward", kl.in_reward)
    out.set("algorithm.kl.in_reward_type", "algorithm.kl_penalty", kl.in_reward_type)
    out.set("algorithm.kl.coef", "algorithm.kl_ctrl.kl_coef", kl.coef)
    control = "adaptive" if kl.adaptive else "fixed"
    out.set("algorithm.kl.adaptive", "algorithm.kl_ctrl.type", control)
    out.set("algorithm.kl.target", "algorithm.kl_ctrl.target_kl", kl.target)
    out.set("algorithm.kl.horizon", "algorithm.kl_ctrl.horizon", kl.horizon)
    groups = algorithm.filter_groups
    out.set("algorithm.filter_groups.enabled", "algorithm.filter_groups.enable", groups.enabled)
    out.set("algorithm.filter_groups.enabled", "algorithm.filter_groups.metric", "reward")
    out.unsupported_key(
        "algorithm.filter_groups.max_num_gen_batches",
        groups.max_num_gen_batches,
        "verl's V1 trainer refills filtered groups with no cap on generation rounds",
        matters=groups.enabled,
    )
    correction, where = algorithm.rollout_correction, "algorithm.rollout_correction"
    out.set(f"{where}.level", f"{where}.rollout_is", correction.level)
    out.set(f"{where}.threshold", f"{where}.rollout_is_threshold", correction.threshold)
    out.unsupported_key(
        "algorithm.epsilon",
        algorithm.epsilon,
        f"verl's GRPO epsilon is fixed at {VERL_GRPO_EPSILON}",
        matters=algorithm.epsilon != VERL_GRPO_EPSILON,
    )
    out.unsupported_key(
        "algorithm.return_at_env_tokens",
        algorithm.return_at_env_tokens,
        "verl 0.9.1 always carries the return through env tokens",
        matters=algorithm.return_at_env_tokens != "carry",
    )
    for key in ("step_weight", "anchor"):
        out.unsupported_key(
            f"algorithm.gigpo.{key}",
            getattr(algorithm.gigpo, key),
            "verl 0.9.1 has no GiGPO (runs with adv_estimator=gigpo are refused)",
            matters=False,
        )
    out.unsupported_key(
        "algorithm.max_turns_schedule",
        [stage.model_dump() for stage in algorithm.max_turns_schedule],
        "verl has no turn-limit curriculum",
        matters=bool(algorithm.max_turns_schedule),
    )
    out.unsupported_key(
        "algorithm.zero_variance_alpha",
        algorithm.zero_variance_alpha,
        "verl 0.9.1 gives groups with equal rewards a zero advantage (no RL-ZVP shaping)",
        matters=algorithm.zero_variance_alpha > 0,
    )


def _actor(out: Overrides, config: TrainConfig) -> None:
    actor = config.actor
    optim = f"{ACTOR}.optim"
    out.set("actor.lr", f"{optim}.lr", actor.lr)
    out.set("actor.weight_decay", f"{optim}.weight_decay", actor.weight_decay)
    out.set("actor.warmup_steps", f"{optim}.lr_warmup_steps", actor.warmup_steps)
    out.set("actor.grad_clip", f"{optim}.clip_grad", actor.grad_clip)
    if actor.lr_schedule == "linear":
        out.unsupported_key(
            "actor.lr_schedule",
            actor.lr_schedule,
            "verl's FSDP optimizer: constant or cosine only",
            matters=True,
        )
    else:
        out.set("actor.lr_schedule", f"{optim}.lr_scheduler_type", actor.lr_schedule)
    out.set("actor.ppo_epochs", f"{ACTOR}.ppo_epochs", actor.ppo_epochs)
    out.set("actor.mini_batch_episodes", f"{ACTOR}.ppo_mini_batch_size", _mini_batch_tasks(config))
    # Token-budgeted micro-batches are verl's dynamic batch size; a budget below the longest
    # episode is raised to it (verl asserts; ours trains such an episode alone).
    out.set("actor.micro_batch_tokens", f"{ACTOR}.use_dynamic_bsz", True)
    budget = max(actor.micro_batch_tokens, config.rollout.max_context)
    out.set("actor.micro_batch_tokens", f"{ACTOR}.ppo_max_token_len_per_gpu", budget)
    # Packed or padded, the numbers are the same; on GPUs verl's packed path is the fast one
    # (its own default), whatever the CPU-minded default here says.
    out.set("actor.packing", f"{MODEL}.use_remove_padding", True)
    out.set("actor.clip_ratio_low", f"{ACTOR}.clip_ratio_low", actor.clip_ratio_low)
    out.set("actor.clip_ratio_high", f"{ACTOR}.clip_ratio_high", actor.clip_ratio_high)
    out.set("actor.clip_ratio_c", f"{ACTOR}.clip_ratio_c", actor.clip_ratio_c)
    out.set("actor.loss_agg_mode", f"{ACTOR}.loss_agg_mode", actor.loss_agg_mode)
    scale = actor.loss_scale_factor or config.rollout.max_context
    out.set("actor.loss_scale_factor", f"{ACTOR}.loss_scale_factor", scale)
    out.set("actor.entropy_coeff", f"{ACTOR}.entropy_coeff", actor.entropy_coeff)
    out.set(
        "actor.recompute_old_logprobs",
        "algorithm.rollout_correction.bypass_mode",
        not actor.recompute_old_logprobs,
    )
    for key, value in actor.demo_loss.model_dump(mode="json").items():
        out.unsupported_key(
            f"actor.demo_loss.{key}",
            value,
            "verl's actor has no supervised loss term (the demonstration loss is agenttrain's "
            "trainer only)",
            matters=actor.demo_loss.coef > 0,
        )


def _mini_batch_tasks(config: TrainConfig) -> int:
    """verl's `ppo_mini_batch_size` counts prompts (each with `rollout.n` episodes)."""
    episodes, group = config.actor.mini_batch_episodes, config.data.group_size
    if episodes is None:
        return config.data.batch_tasks
    if episodes % group:
        raise ValueError(
            f"actor.mini_batch_episodes={episodes} is not a multiple of data.group_size={group}: "
            "verl's mini-batches are whole groups (ppo_mini_batch_size counts tasks)"
        )
    return episodes // group


def _reward(out: Overrides, config: TrainConfig) -> None:
    """A custom reward function replaces the environment's reward, as in `agenttrain train`:
    the agent loop then leaves `reward_score` unset and verl calls the function (with our
    per-episode fields, the env's reward among them, in `extra_info`)."""
    out.unsupported_key(
        "reward.progress_weight",
        config.reward.progress_weight,
        "partial credit for progress is scored by agenttrain's trainer only; under verl, "
        "add it in a custom reward function",
        matters=config.reward.progress_weight > 0,
    )
    out.unsupported_key(
        "reward.progress_fade_steps",
        config.reward.progress_fade_steps,
        "partial credit for progress is scored by agenttrain's trainer only",
        matters=config.reward.progress_fade_steps > 0,
    )
    out.unsupported_key(
        "reward.format_penalty",
        config.reward.format_penalty,
        "the format penalty is scored by agenttrain's trainer only; under verl, subtract it "
        "in a custom reward function",
        matters=config.reward.format_penalty > 0,
    )
    out.unsupported_key(
        "reward.loop_penalty",
        config.reward.loop_penalty,
        "the loop penalty is scored by agenttrain's trainer only; under verl, subtract it "
        "in a custom reward function",
        matters=config.reward.loop_penalty > 0,
    )
    out.unsupported_key(
        "reward.recovery_penalty",
        config.reward.recovery_penalty,
        "the recovery penalty is scored by agenttrain's trainer only; under verl, subtract it "
        "in a custom reward function",
        matters=config.reward.recovery_penalty > 0,
    )
    for name in ("loop", "recovery"):
        scope = getattr(config.reward, f"{name}_penalty_groups")
        out.unsupported_key(
            f"reward.{name}_penalty_groups",
            scope,
            f"the {name} penalty is scored by agenttrain's trainer only",
            matters=scope != "all",
        )
    out.unsupported_key(
        "reward.refusal_penalty_cap",
        config.reward.refusal_penalty_cap,
        "the refusal penalties are scored by agenttrain's trainer only",
        matters=config.reward.refusal_penalty_cap != "none",
    )
    custom = config.reward.custom_function
    if custom.path is None:  # the environment's reward: loop.reward_function stays false
        for key in ("path", "name", "kwargs"):
            out.into(f"reward.custom_function.{key}", "loop.reward_function")
        return
    base = "reward.custom_reward_function"
    out.set("reward.custom_function.path", f"{base}.path", str(Path(custom.path).resolve()))
    out.set("reward.custom_function.name", f"{base}.name", custom.name)
    for key, value in custom.kwargs.items():
        out.set("reward.custom_function.kwargs", f"+{base}.reward_kwargs.{key}", value)
    if not custom.kwargs:
        out.into("reward.custom_function.kwargs", f"{base}.reward_kwargs")
    out.loop.reward_function = True
    out.into("reward.custom_function.path", "loop.reward_function")


def _trainer(out: Overrides, config: TrainConfig) -> None:
    trainer = config.trainer
    folder = config.run.out_dir.resolve()
    out.set("trainer.total_steps", "trainer.total_training_steps", trainer.total_steps)
    # Every epoch has at least one step, so this many epochs never ends a run early.
    out.set("trainer.total_steps", "trainer.total_epochs", trainer.total_steps)
    out.set("trainer.save_freq", "trainer.save_freq", trainer.save_freq)
    out.set("trainer.keep_checkpoints", "trainer.max_actor_ckpt_to_keep", trainer.keep_checkpoints)
    out.set("trainer.test_freq", "trainer.test_freq", trainer.test_freq or -1)
    out.set("trainer.val_tasks", "data.val_max_samples", trainer.val_tasks)
    out.set("trainer.val_n", f"{ROLLOUT}.val_kwargs.n", trainer.val_n)
    temperature = trainer.val_temperature
    out.set("trainer.val_temperature", f"{ROLLOUT}.val_kwargs.temperature", temperature)
    out.set("trainer.val_temperature", f"{ROLLOUT}.val_kwargs.do_sample", temperature > 0)
    out.set(
        "trainer.val_before_train",
        "trainer.val_before_train",
        trainer.val_before_train and trainer.test_freq > 0,
    )
    _resume(out, trainer.resume)
    out.set("trainer.loggers", "trainer.logger", [LOGGERS[name] for name in trainer.loggers])
    if "jsonl" in trainer.loggers:
        metrics = str(folder / "metrics.jsonl")
        out.set("trainer.loggers", f"{RUN_ENV}.VERL_FILE_LOGGER_PATH", metrics)
    if "tensorboard" in trainer.loggers:
        out.set("trainer.loggers", f"{RUN_ENV}.TENSORBOARD_DIR", str(folder / "tensorboard"))
    out.unsupported_key(
        "trainer.max_env_error_rate",
        trainer.max_env_error_rate,
        "verl never stops on env errors (the loop masks them: extra_fields.env_error)",
        matters=trainer.max_env_error_rate < 1,
    )
    trajectories = str(folder / "trajectories") if trainer.save_trajectories else None
    out.set("trainer.save_trajectories", "trainer.rollout_data_dir", trajectories)


def _launcher_settings(out: Overrides, config: TrainConfig) -> None:
    """`launch:` starts local services for our own trainer (`agenttrain launch`)."""
    reason = "read by `agenttrain launch` only; a verl run uses the servers in env.servers"
    for key, value in _leaves(config.launch, "launch"):
        out.unsupported_key(key, value, reason, matters=False)


def _memory_settings(out: Overrides, config: TrainConfig) -> None:
    """The experience pool lives in our rollout engine; verl's agent loop has no such hook."""
    reason = "the experience pool runs in agenttrain's own trainer only (agenttrain train)"
    for key, value in _leaves(config.memory, "memory"):
        out.unsupported_key(key, value, reason, matters=config.memory.enabled)


def _leaves(section: BaseModel, prefix: str) -> list[tuple[str, Any]]:
    """A config section's dotted leaf keys and values (sub-sections recursed)."""
    leaves = []
    for name in type(section).model_fields:
        value = getattr(section, name)
        if isinstance(value, BaseModel):
            leaves += _leaves(value, f"{prefix}.{name}")
        else:
            leaves.append((f"{prefix}.{name}", value))
    return leaves


def _resume(out: Overrides, resume: str) -> None:
    """auto and never as verl's modes; a folder must be one of verl's `global_step_N`."""
    if resume in ("auto", "never"):
        mode = "auto" if resume == "auto" else "disable"
        out.set("trainer.resume", "trainer.resume_mode", mode)
        return
    folder = Path(resume).resolve()
    if not re.fullmatch(r"global_step_\d+", folder.name):
        raise ValueError(
            f"trainer.resume={resume!r}: verl resumes from its own checkpoints "
            "(a global_step_N folder), not from an agenttrain checkpoint"
        )
    out.set("trainer.resume", "trainer.resume_mode", "resume_path")
    out.set("trainer.resume", "trainer.resume_from_path", str(folder))
