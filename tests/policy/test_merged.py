"""Generation from a LoRA policy runs merged weights (W + ΔW), and stays equal to the adapter
model after training steps change the adapter (the GRPO loop's sync)."""

from __future__ import annotations

import copy

import torch
from peft import LoraConfig, get_peft_model

from agenttrain.policy.base import GenerationRequest, SamplingParams
from agenttrain.policy.hf import HFPolicy


def lora_model(tiny_model):
    config = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM")
    model = get_peft_model(copy.deepcopy(tiny_model), config)
    torch.manual_seed(1)
    for name, parameter in model.named_parameters():
        if "lora_B" in name:  # a trained adapter, not the zero update PEFT starts with
            torch.nn.init.normal_(parameter, std=0.5)
    return model


def logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0]


def test_a_lora_policy_generates_from_merged_weights_that_follow_training(tiny_model, tokenizer):
    model = lora_model(tiny_model)
    policy = HFPolicy(model, tokenizer, name="lora", inference_dtype="float32")
    generator = policy.generator_model
    assert not any("lora" in name for name, _ in generator.named_parameters())
    ids = list(range(5, 40))
    assert torch.allclose(logits(generator, ids), logits(model, ids), atol=1e-4)

    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    model.train()
    model(torch.tensor([ids]), labels=torch.tensor([ids])).loss.backward()
    optimizer.step()
    model.eval()
    before = logits(generator, ids)
    policy.sync_weights()
    assert not torch.allclose(logits(generator, ids), before, atol=1e-3)  # the update arrived
    assert torch.allclose(logits(generator, ids), logits(model, ids), atol=1e-4)

    # and greedy decoding through the policy follows the adapter model's own argmax
    prompt = tokenizer("Craft a stick. Action:").input_ids
    (generation,) = policy.generate(
        [GenerationRequest(key="a", prompt_ids=prompt)],
        SamplingParams(temperature=0.0, max_new_tokens=6),
    )
    sequence = list(prompt)
    for token in generation.token_ids:
        assert token == int(logits(model, sequence)[-1].argmax())
        sequence.append(token)
