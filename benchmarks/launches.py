"""Operations dispatched per generate call: the GPU decoder's launch overhead, counted on CPU.

On a GPU a decode call of a small model is bound by how many kernels it launches, not by its
arithmetic (issue 22: the per-row prefill made agenttrain 0.42-0.50x transformers' compiled
`generate` at 128-256 rows on an H200). Every ATen operation dispatched is at least one
launch there, so counting them on a CPU measures that overhead without a card.

Both layouts run the same warm call (the graph decoder, prompts of TextCraft first
observations, `--new-tokens` each, no stop tokens) on a random model with SmolLM2-135M's
layer count and attention shape (30 layers, 9 query / 3 key-value heads of 64) and a narrow
MLP (the count does not depend on widths):
- `per_row`: the CPU layout, one attention call per row and layer in prefill;
- `one_call`: the GPU layout (`batched_rows`), one padded call per pass and layer.
Decode steps run eagerly on CPU and are reported apart: `decode_step_ops` x steps. On a GPU a
step is a replayed CUDA graph, one launch from the host, but the card still runs each of its
kernels: 1,814 ops a step eagerly (57 per layer), which is why the GPU path compiles the
step's layers and sampling (fused kernels; not counted here, the dispatcher does not see them).

Usage: python benchmarks/launches.py [--rows 32 128 256] [--new-tokens 2] [--out F]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import LlamaConfig, LlamaForCausalLM

from agenttrain.policy.base import GenerationRequest, SamplingParams
from agenttrain.policy.decoder import DEVICE_PREFILL_TOKENS, PREFILL_TOKENS
from agenttrain.policy.hf import HFPolicy
from agenttrain.policy.models import load_hf, resolve
from decode import prompts  # benchmarks/ is the script's folder


class _Count(TorchDispatchMode):
    """Counts ATen operations dispatched inside its `with` block."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def counted(call: Callable[[], object]) -> int:
    counter = _Count()
    with counter:
        call()
    return counter.ops


def smollm2_shaped(vocab: int) -> torch.nn.Module:
    config = LlamaConfig(
        hidden_size=72,
        intermediate_size=128,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        head_dim=64,
        vocab_size=vocab,
        tie_word_embeddings=True,
        max_position_embeddings=8192,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def layout_row(model, tokenizer, batch, new_tokens: int, one_call: bool) -> dict:
    policy = HFPolicy(
        model,
        tokenizer,
        name="shape",
        decode="graph",
        cache_slots=len(batch),
        inference_dtype="auto",
    )
    decoder = policy.decoder
    decoder.batched_rows = one_call
    decoder.prefill_tokens = DEVICE_PREFILL_TOKENS if one_call else PREFILL_TOKENS
    decoder.stop_ids = frozenset()
    params = SamplingParams(temperature=0.7, max_new_tokens=new_tokens)
    requests = [GenerationRequest(p, seed=i) for i, p in enumerate(batch)]
    policy.generate(requests, params)  # warm-up: the arena grows to its size
    steps_before = decoder.stats["eager_steps"]
    ops = counted(lambda: policy.generate(requests, params))
    steps = decoder.stats["eager_steps"] - steps_before
    with torch.inference_mode():  # one more step over the (now idle) rows, counted alone
        step_ops = counted(lambda: decoder._step(decoder._shape(len(batch), 1024, params)))
    return {
        "ops": ops,
        "decode_steps": steps,
        "decode_step_ops": step_ops,
        "ops_without_decode_steps": ops - steps * step_ops,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[32, 128, 256])
    parser.add_argument("--new-tokens", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    _, tokenizer = load_hf(resolve("smollm2-135m"), device="cpu", dtype=torch.float32)
    model = smollm2_shaped(len(tokenizer))
    results = []
    for rows in args.rows:
        batch = prompts(tokenizer, rows)
        row = {"rows": rows, "mean_prompt_tokens": round(sum(map(len, batch)) / rows, 1)}
        for name, one_call in (("per_row", False), ("one_call", True)):
            row[name] = layout_row(model, tokenizer, batch, args.new_tokens, one_call)
        print(json.dumps(row), flush=True)
        results.append(row)
    report = {
        "benchmark": "launches",
        "workload": "ATen ops dispatched by one warm generate call of the graph decoder, "
        f"{args.new_tokens} new tokens a row, TextCraft first observations, "
        "30-layer SmolLM2-shaped random model on CPU",
        "torch": torch.__version__,
        "results": results,
    }
    out = args.out or Path(__file__).parent / "results" / "launches.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
