"""Our recipe as verl overrides: every key accounted for, and verl's own Hydra config and
config dataclasses accept what we generate (a misspelt key or a bad value is caught)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agenttrain.config import load
from agenttrain.integrations.verl.data import data_file
from agenttrain.integrations.verl.overrides import Overrides, verl_overrides
from agenttrain.integrations.verl.settings import AGENT_NAME
from agenttrain.rl.config import TrainConfig

CONFIGS = Path(__file__).resolve().parents[2] / "configs"

RECIPES = {
    "lora-grpo-kl-loss": [],
    "full-drgrpo-kl-in-reward": [
        "model.lora.enabled=false",
        "algorithm.norm_adv_by_std=false",
        "actor.loss_agg_mode=seq-mean-token-sum-norm",
        "algorithm.kl.use_kl_loss=false",
        "algorithm.kl.in_reward=true",
        "algorithm.kl.adaptive=true",
        "actor.lr_schedule=cosine",
        "actor.warmup_steps=2",
        "algorithm.rollout_correction.level=sequence",
        "algorithm.rollout_correction.threshold=3.0",
    ],
    "rloo-dapo-bypass": [
        "algorithm.adv_estimator=rloo",
        "algorithm.filter_groups.enabled=true",
        "actor.clip_ratio_high=0.28",
        "actor.recompute_old_logprobs=false",
        "actor.mini_batch_episodes=8",
        "actor.ppo_epochs=2",
        "trainer.loggers=[console,jsonl,wandb,mlflow]",
        "trainer.test_freq=0",
        "trainer.val_temperature=0.7",
        "trainer.val_n=4",
        "sampling.top_k=20",
    ],
    "lora-grpo-custom-reward": [
        "reward.custom_function.path=my_reward.py",
        "reward.custom_function.name=score_episode",
        "reward.custom_function.kwargs={bonus: 0.5}",
    ],
}


def leaf_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every dotted leaf key of a config model (sections recursed, values are leaves)."""
    keys = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys += leaf_keys(annotation, f"{prefix}{name}.")
        else:
            keys.append(f"{prefix}{name}")
    return keys


def recipe(model_dir: Path, overrides: list[str], tmp_path: Path) -> TrainConfig:
    base = [f"model.path={model_dir}", f"run.out_dir={tmp_path / 'run'}"]
    return load(TrainConfig, CONFIGS / "textcraft_grpo.yaml", base + overrides)


def several(model_dir: Path, envs: str, tmp_path: Path) -> TrainConfig:
    """A multi-environment recipe (no `env:` section, as `envs` replaces it)."""
    base = [f"model.path={model_dir}", f"run.out_dir={tmp_path / 'run'}"]
    return load(TrainConfig, None, [*base, "rollout.max_context=2048", envs])


def generate(config: TrainConfig, tmp_path: Path, **kwargs: Any) -> Overrides:
    return verl_overrides(
        config,
        train_files=[data_file(tmp_path, e.name, e.split, "verl") for e in config.environments],
        val_files=[data_file(tmp_path, e.name, e.val_split, "verl") for e in config.environments],
        loop_config_path=tmp_path / "agent_loop.yaml",
        **kwargs,
    )


@pytest.fixture(scope="module")
def verl_config_dir() -> str:
    verl = pytest.importorskip(
        "verl", reason="agenttrain[verl] not installed (make setup installs it)"
    )
    return str(Path(verl.__file__).parent / "trainer" / "config")


def compose(config_dir: str, args: list[str]) -> Any:
    """verl's `main_ppo` config with our overrides, as `hydra.main` composes it."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=args)


def validate(composed: Any) -> None:
    """What `main_ppo` checks before it starts Ray, plus the config dataclasses it builds."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    rollout_name = composed.actor_rollout_ref.rollout.name
    # validate_config's LoRA-rank check for vLLM imports vllm, a GPU extra not installed here;
    # the rank itself is checked against vLLM's allowed ranks below.
    composed.actor_rollout_ref.rollout.name = "sglang"
    validate_config(
        composed,
        use_reference_policy=need_reference_policy(composed),
        use_critic=need_critic(composed),
    )
    composed.actor_rollout_ref.rollout.name = rollout_name
    for section in (
        composed.algorithm,
        composed.actor_rollout_ref.rollout,
        composed.actor_rollout_ref.model,
    ):
        omega_conf_to_dataclass(section)
    assert composed.actor_rollout_ref.model.lora_rank in (0, 1, 8, 16, 32, 64, 128, 256, 320, 512)


def test_every_train_config_key_is_mapped_or_reported(smollm2_dir, tmp_path):
    for overrides in RECIPES.values():
        result = generate(recipe(smollm2_dir, overrides, tmp_path), tmp_path)
        reported = [item.key for item in result.unsupported]
        assert len(reported) == len(set(reported))
        assert not set(reported) & set(result.mapped), "a key both mapped and reported"
        assert sorted([*result.mapped, *reported]) == sorted(leaf_keys(TrainConfig))
        assert all(item.reason for item in result.unsupported)


def test_mapped_keys_name_the_verl_keys_they_set(smollm2_dir, tmp_path):
    result = generate(recipe(smollm2_dir, [], tmp_path), tmp_path)
    set_keys = {arg.split("=", 1)[0] for arg in result.args}
    for ours, targets in result.mapped.items():
        for target in targets:
            if not target.startswith(("loop.", "data:", "data.train_files", "data.val_files")):
                assert target in set_keys, f"{ours} -> {target} is not among the overrides"


@pytest.mark.parametrize("name", list(RECIPES))
def test_overrides_compose_with_verls_config_and_validate(
    name, smollm2_dir, tmp_path, verl_config_dir
):
    config = recipe(smollm2_dir, RECIPES[name], tmp_path)
    result = generate(config, tmp_path, n_gpus_per_node=2, nnodes=2)
    composed = compose(verl_config_dir, result.args)
    validate(composed)

    actor = composed.actor_rollout_ref.actor
    rollout = composed.actor_rollout_ref.rollout
    assert composed.data.train_batch_size == config.data.batch_tasks
    assert rollout.n == config.data.group_size
    correction = composed.algorithm.rollout_correction  # TIS, where verl applies it
    assert correction.rollout_is == config.algorithm.rollout_correction.level
    assert correction.rollout_is_threshold == config.algorithm.rollout_correction.threshold
    episodes = config.data.batch_tasks * config.data.group_size
    mini_episodes = config.actor.mini_batch_episodes or episodes
    assert actor.ppo_mini_batch_size * rollout.n == mini_episodes
    assert composed.data.max_prompt_length + composed.data.max_response_length == 2048
    assert actor.optim.lr == config.actor.lr and actor.optim.weight_decay == 0.0
    assert actor.clip_ratio_high == config.actor.clip_ratio_high
    assert actor.loss_agg_mode == config.actor.loss_agg_mode
    assert composed.algorithm.adv_estimator == config.algorithm.adv_estimator
    assert composed.algorithm.norm_adv_by_std_in_grpo == config.algorithm.norm_adv_by_std
    assert actor.use_kl_loss == config.algorithm.kl.use_kl_loss
    assert composed.algorithm.use_kl_in_reward == config.algorithm.kl.in_reward
    assert rollout.agent.default_agent_loop == AGENT_NAME
    assert rollout.agent.agent_loop_config_path == str(tmp_path / "agent_loop.yaml")
    assert composed.trainer.n_gpus_per_node == 2 and composed.trainer.nnodes == 2
    assert composed.trainer.total_training_steps == config.trainer.total_steps
    lora = config.model.lora
    assert composed.actor_rollout_ref.model.lora_rank == (lora.rank if lora.enabled else 0)
    assert composed.actor_rollout_ref.model.path == str(smollm2_dir)
    assert list(composed.data.train_files) == [str(tmp_path / "textcraft_train.parquet")]


def test_several_environments_train_from_one_data_file_each(smollm2_dir, tmp_path, verl_config_dir):
    servers = "{name: largest, servers: [http://env-host:36001], weight: 3}"
    config = several(smollm2_dir, f"envs=[textcraft, {servers}]", tmp_path)
    result = generate(config, tmp_path)
    composed = compose(verl_config_dir, result.args)
    validate(composed)
    assert list(composed.data.train_files) == [
        str(tmp_path / "textcraft_train.parquet"),
        str(tmp_path / "largest_train.parquet"),
    ]
    assert result.loop.servers == {"largest": ["http://env-host:36001"]}
    weight = next(item for item in result.unsupported if item.key == "env.weight")
    assert weight.value == [1, 3] and weight.matters


def test_environments_needing_different_loop_settings_are_refused(smollm2_dir, tmp_path):
    config = several(smollm2_dir, "envs=[textcraft, {name: largest, action_format: raw}]", tmp_path)
    with pytest.raises(ValueError, match=r"env\.action_format differs between environments"):
        generate(config, tmp_path)


def test_dapo_filter_recipe_maps_to_verls_v1_group_filter(smollm2_dir, tmp_path, verl_config_dir):
    config = recipe(smollm2_dir, RECIPES["rloo-dapo-bypass"], tmp_path)
    composed = compose(verl_config_dir, generate(config, tmp_path).args)
    groups = composed.algorithm.filter_groups
    assert groups.enable is True and groups.metric == "reward"
    assert composed.algorithm.rollout_correction.bypass_mode is True
    assert composed.actor_rollout_ref.rollout.top_k == 20
    assert list(composed.trainer.logger) == ["console", "file", "wandb", "mlflow"]
    env_vars = composed.ray_kwargs.ray_init.runtime_env.env_vars
    assert str(tmp_path / "run" / "metrics.jsonl") == env_vars.VERL_FILE_LOGGER_PATH
    assert composed.trainer.test_freq == -1 and composed.trainer.val_before_train is False


def test_a_misspelt_or_invalid_override_is_caught(smollm2_dir, tmp_path, verl_config_dir):
    from hydra.errors import ConfigCompositionException, InstantiationException

    args = generate(recipe(smollm2_dir, [], tmp_path), tmp_path).args
    with pytest.raises(ConfigCompositionException, match="clip_ratio_hihg"):
        compose(verl_config_dir, [*args, "actor_rollout_ref.actor.clip_ratio_hihg=0.28"])
    composed = compose(verl_config_dir, [*args, "actor_rollout_ref.actor.loss_agg_mode=mean"])
    with pytest.raises(InstantiationException, match="Invalid loss_agg_mode: mean"):
        validate(composed)


def test_values_hydra_would_misread_are_quoted(smollm2_dir, tmp_path, verl_config_dir):
    config = recipe(smollm2_dir, ["run.name='grpo, try 2 [fast]'"], tmp_path)
    composed = compose(verl_config_dir, generate(config, tmp_path).args)
    assert composed.trainer.experiment_name == "grpo, try 2 [fast]"


def test_mini_batches_must_be_whole_groups(smollm2_dir, tmp_path):
    config = recipe(smollm2_dir, ["actor.mini_batch_episodes=6"], tmp_path)
    with pytest.raises(ValueError, match=r"multiple of data\.group_size=4"):
        generate(config, tmp_path)


def test_prompt_budget_must_leave_a_response_budget(smollm2_dir, tmp_path):
    with pytest.raises(ValueError, match=r"below rollout\.max_context=2048"):
        generate(recipe(smollm2_dir, [], tmp_path), tmp_path, prompt_length=2048)


def test_an_agenttrain_checkpoint_cannot_be_resumed_by_verl(smollm2_dir, tmp_path):
    checkpoint = tmp_path / "run" / "checkpoints" / "step-4"
    config = recipe(smollm2_dir, [f"trainer.resume={checkpoint}"], tmp_path)
    with pytest.raises(ValueError, match="global_step_N"):
        generate(config, tmp_path)


@pytest.fixture(scope="module")
def adapter_dir(tiny_model, tiny_model_dir, tmp_path_factory) -> Path:
    """A LoRA checkpoint (rank 8) of the tiny model, as an SFT run leaves one."""
    import copy

    from peft import LoraConfig, get_peft_model

    folder = tmp_path_factory.mktemp("sft") / "model"
    lora = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"])
    get_peft_model(copy.deepcopy(tiny_model), lora).save_pretrained(folder)
    (folder / "agenttrain.json").write_text(json.dumps({"base_model": str(tiny_model_dir)}))
    return folder


def test_a_lora_checkpoint_trains_on_with_its_own_shape(adapter_dir, tiny_model_dir, tmp_path):
    config = recipe(adapter_dir, [], tmp_path)
    result = generate(config, tmp_path)
    args = dict(arg.split("=", 1) for arg in result.args)
    assert args["actor_rollout_ref.model.path"] == str(tiny_model_dir)
    assert args["actor_rollout_ref.model.lora_adapter_path"] == str(adapter_dir)
    assert args["actor_rollout_ref.model.lora_rank"] == "8"
    assert args["actor_rollout_ref.model.lora_alpha"] == "16"
    assert "model.lora.rank" in [item.key for item in result.unsupported]
    assert any("adapter switched off" in note for note in result.notes)  # KL loss is on


def test_full_fine_tuning_from_a_lora_checkpoint_is_refused(adapter_dir, tmp_path):
    config = recipe(adapter_dir, ["model.lora.enabled=false"], tmp_path)
    with pytest.raises(ValueError, match="--merge-lora"):
        generate(config, tmp_path)


def test_a_custom_reward_function_is_verls_and_the_loop_leaves_the_score_to_it(
    smollm2_dir, tmp_path
):
    config = recipe(smollm2_dir, RECIPES["lora-grpo-custom-reward"], tmp_path)
    result = generate(config, tmp_path)
    assert f"reward.custom_reward_function.path={Path('my_reward.py').resolve()}" in result.args
    assert "reward.custom_reward_function.name=score_episode" in result.args
    assert "+reward.custom_reward_function.reward_kwargs.bonus=0.5" in result.args
    assert result.loop.reward_function is True
    assert not [u for u in result.unsupported if u.key.startswith("reward.custom_function")]


def test_an_enabled_experience_pool_is_reported_as_mattering(smollm2_dir, tmp_path):
    """A verl run would silently train without experience: the user must be told."""
    quiet = generate(recipe(smollm2_dir, [], tmp_path), tmp_path)
    loud = generate(recipe(smollm2_dir, ["memory.enabled=true"], tmp_path), tmp_path)
    assert not any(i.matters for i in quiet.unsupported if i.key.startswith("memory."))
    enabled = next(i for i in loud.unsupported if i.key == "memory.enabled")
    assert enabled.matters and "agenttrain train" in enabled.reason


@pytest.mark.parametrize(
    "key, value",
    [
        ("reward.progress_weight", 0.5),
        ("reward.format_penalty", 0.2),
        ("reward.loop_penalty", 0.2),
        ("reward.recovery_penalty", 0.2),
    ],
)
def test_a_reward_shaping_key_is_reported_as_mattering_under_verl(
    smollm2_dir, tmp_path, key, value
):
    """verl would train on success alone: partial credit and the format penalty are scored by
    our trainer only, so setting either is reported, with the custom-function way around it."""
    quiet = generate(recipe(smollm2_dir, [], tmp_path), tmp_path)
    loud = generate(recipe(smollm2_dir, [f"{key}={value}"], tmp_path), tmp_path)
    assert not any(i.matters for i in quiet.unsupported if i.key == key)
    reported = next(i for i in loud.unsupported if i.key == key)
    assert reported.matters and "custom reward function" in reported.reason


@pytest.mark.parametrize(
    "key, value",
    [("reward.loop_penalty_groups", "solved"), ("reward.refusal_penalty_cap", "progress")],
)
def test_where_and_how_much_the_penalties_charge_is_reported_under_verl(
    smollm2_dir, tmp_path, key, value
):
    """Under verl the penalties are not scored at all, so their scope and cap are reported
    too."""
    penalty = ["reward.loop_penalty=0.2", "reward.progress_weight=0.5"]
    quiet = generate(recipe(smollm2_dir, penalty, tmp_path), tmp_path)
    loud = generate(recipe(smollm2_dir, [*penalty, f"{key}={value}"], tmp_path), tmp_path)
    assert not any(i.matters for i in quiet.unsupported if i.key == key)
    reported = next(i for i in loud.unsupported if i.key == key)
    assert reported.matters and reported.value == value


def test_a_task_class_curriculum_is_reported_as_mattering_under_verl(smollm2_dir, tmp_path):
    """verl trains on every exported task: a depth-1-only run would silently train on all."""
    quiet = generate(recipe(smollm2_dir, [], tmp_path), tmp_path)
    loud = generate(recipe(smollm2_dir, ["env.task_strata=[depth 1]"], tmp_path), tmp_path)
    assert not any(i.matters for i in quiet.unsupported if i.key == "env.task_strata")
    strata = next(i for i in loud.unsupported if i.key == "env.task_strata")
    assert strata.matters and strata.value == ["depth 1"]
