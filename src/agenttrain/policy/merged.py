"""A LoRA policy's generation copy with the adapter folded into the weights.

Decoding through unmerged LoRA layers runs two extra small matmuls and a scale-and-add per
linear layer at every token: kernel launches that cost more than the arithmetic, on a CPU and
even more on a GPU. Generation therefore runs a plain model whose weights are W + ΔW; training
keeps the adapter. `merged_state` recomputes W + ΔW after an update without copying the model.
"""

from __future__ import annotations

import copy
from typing import Any

import torch


def is_lora(model: torch.nn.Module) -> bool:
    from peft import PeftModel

    return isinstance(model, PeftModel)


def merged_copy(model: Any, dtype: torch.dtype) -> torch.nn.Module:
    """A plain model (no adapter layers) in `dtype` computing what the LoRA `model` computes."""
    plain = copy.deepcopy(model).merge_and_unload()
    return plain.to(dtype).eval()


def merged_state(model: Any) -> dict[str, torch.Tensor]:
    """The state dict of `model` merged: each LoRA layer's weight is W + ΔW of its active
    adapters; other tensors as they are, under the plain model's names."""
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    state: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for name, module in base.named_modules():
            if isinstance(module, LoraLayer):
                weight = module.get_base_layer().weight
                for adapter in module.active_adapters:
                    if adapter in module.lora_A:
                        weight = weight + module.get_delta_weight(adapter)
                state[f"{name}.weight"] = weight
        for name, tensor in base.state_dict().items():
            if ".lora_" not in name:
                state.setdefault(name.replace(".base_layer.", "."), tensor)
    return state
