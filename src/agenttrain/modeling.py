"""The trainable model both trainers (GRPO and SFT) start from: its settings and its loading.

A run starts from a model spec (the embedded model, a model folder, or another run's
checkpoint, e.g. an SFT adapter) or resumes from its own checkpoint; LoRA adapters are kept
training, or merged into the base for full fine-tuning.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

from agenttrain.policy.hf import resolve_inference_dtype
from agenttrain.policy.models import load_hf, resolve


class LoraConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    rank: int = Field(16, ge=1)
    alpha: int = Field(32, ge=1)
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: str | list[str] = "all-linear"


class ModelConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = "smollm2-135m"
    """A model spec: smollm2-135m, a model folder, or a checkpoint (e.g. of an SFT run)."""
    lora: LoraConfig = Field(default_factory=LoraConfig)
    device: str = "cpu"
    generation_dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    decode: Literal["auto", "arena", "graph"] = "auto"
    """Decode path: graph (static-shape steps, CUDA graphs on a GPU), arena (tuned for CPU),
    auto: graph on CUDA, arena elsewhere. Both give the same tokens greedily."""
    draft_tokens: int | None = Field(None, ge=0)
    """Tokens guessed from each row's own context and checked in the same decode step, kept
    as sampling would draw them (speculative sampling; tokens distributed as without); 0 =
    off. Several tokens a step where replies repeat their context. None: the decode path's
    default: 6 on the arena path (measured on CPU), 0 on the graph path (not yet
    measured on a card)."""
    train_dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """Autocast precision of training passes (fp32 master weights and optimizer either way);
    auto: bf16 on CUDA and on CPUs with native bf16, else fp32."""
    gradient_checkpointing: bool = False


def build_trainable(
    config: ModelConfig, resume_from: Path | None = None, seed: int | None = None
) -> tuple[Any, Any]:
    """(model in train mode, tokenizer): from `resume_from`'s model folder, else `config.path`.

    With `seed`, torch's generator is seeded again right before a new LoRA adapter draws its
    initial weights: loading may or may not have advanced it (the first run on a machine
    converts the embedded GGUF, which draws; later runs read the converted copy, which does
    not), and two runs of one config then started from different adapters. Reseeding gives
    every run what a run on a warm machine always got."""
    from peft import LoraConfig as PeftLoraConfig
    from peft import PeftModel, get_peft_model

    spec = resolve(str(resume_from) if resume_from else config.path)
    model, tokenizer = load_hf(spec, device=config.device, dtype=torch.float32, trainable=True)
    if isinstance(model, PeftModel):
        if not config.lora.enabled:  # full fine-tuning from an adapter checkpoint
            model = model.merge_and_unload()
    elif config.lora.enabled:
        lora = PeftLoraConfig(
            r=config.lora.rank,
            lora_alpha=config.lora.alpha,
            lora_dropout=config.lora.dropout,
            target_modules=config.lora.target_modules,
            bias="none",
            task_type="CAUSAL_LM",
        )
        if seed is not None:
            torch.manual_seed(seed)
        with warnings.catch_warnings():  # PEFT calls a transformers API deprecated in v5
            warnings.filterwarnings("ignore", message="`is_gradient_checkpointing`")
            model = get_peft_model(model, lora)
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable()
        if hasattr(model, "enable_input_require_grads"):
            model.enable_input_require_grads()
    model.train()
    return model, tokenizer


def autocast(config: ModelConfig) -> Any:
    """The autocast context of training passes (a no-op in fp32)."""
    from contextlib import nullcontext

    device = torch.device(config.device)
    dtype = resolve_inference_dtype(config.train_dtype, device)
    return nullcontext() if dtype == torch.float32 else torch.autocast(device.type, dtype=dtype)


def starts_from_adapter(config: ModelConfig) -> bool:
    """Whether `model.path` is a LoRA checkpoint (e.g. an SFT run) rather than a plain model."""
    return resolve(config.path).base is not None


def load_reference(config: ModelConfig) -> Any:
    """The KL reference: the starting policy, frozen, built afresh from `config.path`.

    Built from the files, never copied from the live model, so that after a resume it is
    still the step-0 policy; and built exactly as the live model was at step 0 (a starting
    LoRA adapter kept as an adapter, or merged for full fine-tuning), so that the two compute
    the same numbers in any precision and KL starts at exactly 0.
    """
    model, _ = build_trainable(config.model_copy(update={"gradient_checkpointing": False}))
    model.eval()
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    return model
