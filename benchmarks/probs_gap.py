"""Where the rollout/trainer probability gap (`training/rollout_probs_diff_mean`) comes from.

The same sampled tokens are scored six ways and each pair's mean |p_a - p_b| is reported:
agenttrain's decoder (bf16 weights, and fp32), transformers' forward with bf16 weights, the
trainer's forward (fp32 weights under bf16 autocast), plain fp32, and the trainer and bf16
forward with the LM head in fp32. On a CPU with native bf16 the kernels round as a GPU's do.

Usage: python benchmarks/probs_gap.py [--rows 8] [--new-tokens 64] [--out F]
"""

from __future__ import annotations

import argparse
import copy
import json
from contextlib import nullcontext
from pathlib import Path

import torch

from agenttrain.policy.base import GenerationRequest, SamplingParams
from agenttrain.policy.hf import HFPolicy
from agenttrain.policy.models import load_hf, resolve
from agenttrain.policy.sampling import token_logprobs
from decode import prompts  # benchmarks/ is the script's folder

TEMPERATURE = 0.6


def scored(model, batch, generations, autocast: bool, fp32_head: bool) -> torch.Tensor:
    """Log-probs of the generated tokens under one full forward pass per row."""
    context = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else nullcontext()
    head = model.lm_head.weight.float()
    values = []
    for prompt, generation in zip(batch, generations, strict=True):
        ids = torch.tensor([prompt + generation.token_ids])
        with torch.no_grad():
            with context:
                if fp32_head:
                    hidden = model.model(ids).last_hidden_state[0, len(prompt) - 1 : -1]
                else:
                    logits = model(ids).logits[0, len(prompt) - 1 : -1]
            if fp32_head:
                logits = hidden.float() @ head.T
        values.append(token_logprobs(logits, ids[0, len(prompt) :], TEMPERATURE))
    return torch.cat(values)


def gap(a: torch.Tensor, b: torch.Tensor) -> float:
    return round(float((a.exp() - b.exp()).abs().mean()), 5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    torch.manual_seed(0)
    model, tokenizer = load_hf(resolve("smollm2-135m"), device="cpu", dtype=torch.float32)
    model.eval()
    batch = prompts(tokenizer, args.rows)
    params = SamplingParams(temperature=TEMPERATURE, max_new_tokens=args.new_tokens)
    requests = [GenerationRequest(p, seed=i) for i, p in enumerate(batch)]
    decoded = {}
    for dtype in ("bfloat16", "float32"):
        policy = HFPolicy(model, tokenizer, name="s", decode="graph", inference_dtype=dtype)
        decoded[dtype] = policy.generate(requests, params)
    generations = decoded["bfloat16"]  # the tokens every side scores
    decoder = torch.cat([torch.tensor(g.logprobs) for g in generations])
    bf16_model = copy.deepcopy(model).to(torch.bfloat16)
    trainer = scored(model, batch, generations, autocast=True, fp32_head=False)
    fp32 = scored(model, batch, generations, autocast=False, fp32_head=False)
    hf_bf16 = scored(bf16_model, batch, generations, autocast=False, fp32_head=False)
    trainer_head = scored(model, batch, generations, autocast=True, fp32_head=True)
    hf_bf16_head = scored(bf16_model, batch, generations, autocast=False, fp32_head=True)
    fp32_tokens = decoded["float32"]
    decoder_fp32 = torch.cat([torch.tensor(g.logprobs) for g in fp32_tokens])
    fp32_of_those = scored(model, batch, fp32_tokens, autocast=False, fp32_head=False)
    pairs = {
        "decoder_bf16_vs_trainer": gap(decoder, trainer),
        "hf_bf16_vs_trainer": gap(hf_bf16, trainer),
        "decoder_bf16_vs_hf_bf16": gap(decoder, hf_bf16),
        "trainer_vs_fp32": gap(trainer, fp32),
        "fp32_head_hf_bf16_vs_trainer": gap(hf_bf16_head, trainer_head),
        "decoder_fp32_vs_fp32": gap(decoder_fp32, fp32_of_those),
    }
    report = {
        "benchmark": "probs_gap",
        "workload": f"SmolLM2-135M base, {args.rows} TextCraft first observations, up to "
        f"{args.new_tokens} tokens sampled at T {TEMPERATURE}; mean |p_a - p_b| over the tokens",
        "cpu_bf16": "avx512_bf16" in Path("/proc/cpuinfo").read_text(),
        "tokens": decoder.numel(),
        "mean_p": round(float(decoder.exp().mean()), 3),
        "pairs": pairs,
        "torch": torch.__version__,
    }
    print(json.dumps(report, indent=2))
    out = args.out or Path(__file__).parent / "results" / "probs_gap.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
