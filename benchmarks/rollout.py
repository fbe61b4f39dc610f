"""Rollout throughput with SmolLM2-135M on CPU: generated tokens/s and episodes/min.

Compares, on the same TextCraft episodes (test tasks, fixed turn and token limits):
- agenttrain's engine with 1, 8 and 32 episodes in flight (batched generation, KV caches
  kept across turns, bf16 weights where the CPU has native bf16), each level run twice in
  the same process: with prompt-prefix sharing off (every row computes and attends its
  whole prompt) and on (a prefix shared by rows is computed once and attended once);
- the same at 32 in flight with GRPO groups (4 tasks x 8 samples: whole prompts shared);
- a sequential loop, one episode at a time, re-encoding the conversation each turn and
  calling `model.generate` (how the seed scripts play);
- the roofline: this machine's measured fp32 GEMM FLOP/s / (2 x parameters) tokens/s.

Usage: python benchmarks/rollout.py [--levels 1 8 32] [--group-size 8] [--turns 6]
       [--new-tokens 96] [--sequential-episodes 4] [--out F]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from agenttrain.agent.formats import get_format
from agenttrain.envs import get_spec, make_env
from agenttrain.policy import decoder
from agenttrain.policy.base import SamplingParams
from agenttrain.policy.hf import HFPolicy
from agenttrain.policy.models import load_hf, resolve
from agenttrain.rollout import EpisodeRequest, RolloutConfig, RolloutEngine


def gemm_flops(dtype: torch.dtype, size: int = 2048, repeats: int = 5) -> float:
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    for _ in range(2):
        a @ b
    started = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * size**3 * repeats / (time.perf_counter() - started)


@contextmanager
def prefix_sharing(enabled: bool) -> Iterator[None]:
    """Turn the decoder's prompt-prefix sharing off (thresholds no prefix reaches) or leave it."""
    saved = decoder.MIN_SHARED_PREFIX, decoder.MIN_SHARED_ATTENTION
    if not enabled:
        decoder.MIN_SHARED_PREFIX = decoder.MIN_SHARED_ATTENTION = 10**9
    try:
        yield
    finally:
        decoder.MIN_SHARED_PREFIX, decoder.MIN_SHARED_ATTENTION = saved


def engine_run(policy, tasks, in_flight, turns, new_tokens, group_size=1, share=True) -> dict:
    spec = get_spec("textcraft")
    config = RolloutConfig(
        max_turns=turns, max_new_tokens=new_tokens, max_in_flight=in_flight, max_format_errors=turns
    )
    sampling = SamplingParams(temperature=0.7, max_new_tokens=new_tokens)
    engine = RolloutEngine(policy, spec, lambda: make_env("textcraft"), config, sampling)
    requests = [
        EpisodeRequest(t, str(t), sample=s, seed=s) for t in tasks for s in range(group_size)
    ]
    counters = policy.decoder.stats
    before = dict(counters)
    started = time.perf_counter()
    with prefix_sharing(share):
        trajectories = asyncio.run(engine.run(requests))
    elapsed = time.perf_counter() - started
    tokens = sum(t.generated_tokens for t in trajectories)
    return {
        "prefix_sharing": share,
        "group_size": group_size,
        "prefill_tokens": counters["prefill_tokens"] - before["prefill_tokens"],
        "copied_prefix_tokens": counters["copied_prefix_tokens"] - before["copied_prefix_tokens"],
        "episodes": len(trajectories),
        "generated_tokens": tokens,
        "seconds": round(elapsed, 1),
        "tokens_per_s": round(tokens / elapsed, 1),
        "episodes_per_min": round(60 * len(trajectories) / elapsed, 2),
        "generate_calls": engine.stats["generate_calls"],
        "mean_turns": round(sum(t.num_turns for t in trajectories) / len(trajectories), 2),
    }


def sequential_run(model, tokenizer, tasks, turns, new_tokens) -> dict:
    """One episode at a time; each turn re-encodes the whole chat and calls model.generate."""
    spec = get_spec("textcraft")
    react = get_format("react", "textcraft")
    start = [m.to_dict() for m in spec.conversation_start]
    tokens = 0
    started = time.perf_counter()
    for task_id in tasks:
        env = make_env("textcraft")
        first = asyncio.run(env.reset(task_id))
        messages = [*start, {"role": "user", "content": first.text}]
        for _ in range(turns):
            ids = tokenizer(
                tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True),
                return_tensors="pt",
                add_special_tokens=False,
            )
            with torch.no_grad():
                output = model.generate(
                    **ids,
                    max_new_tokens=new_tokens,
                    do_sample=True,
                    temperature=0.7,
                    pad_token_id=tokenizer.eos_token_id,
                )
            new = output[0, ids["input_ids"].shape[1] :]
            tokens += len(new)
            reply = tokenizer.decode(new, skip_special_tokens=True)
            parsed = react.parse(reply)
            observation = parsed.feedback or ""
            if parsed.action is not None:
                result = asyncio.run(env.step(parsed.action))
                observation = result.observation
                if result.done:
                    break
            messages += [
                {"role": "assistant", "content": reply},
                {"role": "user", "content": observation},
            ]
    elapsed = time.perf_counter() - started
    return {
        "episodes": len(tasks),
        "generated_tokens": tokens,
        "seconds": round(elapsed, 1),
        "tokens_per_s": round(tokens / elapsed, 1),
        "episodes_per_min": round(60 * len(tasks) / elapsed, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--group-size", type=int, default=8, help="for the extra GRPO-group row")
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--sequential-episodes", type=int, default=4)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "rollout.json"
    )
    args = parser.parse_args()

    torch.manual_seed(0)
    model, tokenizer = load_hf(resolve("smollm2-135m"))
    params = sum(p.numel() for p in model.parameters())
    fp32, bf16 = gemm_flops(torch.float32), gemm_flops(torch.bfloat16)
    roofline = fp32 / (2 * params)
    print(
        json.dumps(
            {
                "parameters": params,
                "fp32_gemm_gflops": round(fp32 / 1e9, 1),
                "bf16_gemm_gflops": round(bf16 / 1e9, 1),
                "roofline_tokens_per_s": round(roofline, 1),
            }
        )
    )
    test = list(get_spec("textcraft").split("test"))
    policy = HFPolicy(model, tokenizer, name="smollm2-135m", inference_dtype="auto")
    runs = [(level, 1) for level in args.levels]
    if args.group_size > 1:
        runs.append((max(args.levels), args.group_size))
    levels = []
    for in_flight, group_size in runs:
        tasks = test[: max(in_flight, 8) // group_size]
        for share in (False, True):
            result = {
                "in_flight": in_flight,
                **engine_run(
                    policy, tasks, in_flight, args.turns, args.new_tokens, group_size, share
                ),
            }
            result["fraction_of_roofline"] = round(result["tokens_per_s"] / roofline, 3)
            levels.append(result)
            print(json.dumps(result))
    sequential = None
    if args.sequential_episodes:
        sequential = sequential_run(
            model, tokenizer, test[: args.sequential_episodes], args.turns, args.new_tokens
        )
        sequential["fraction_of_roofline"] = round(sequential["tokens_per_s"] / roofline, 3)
        print(json.dumps({"sequential_generate_loop": sequential}))
    report = {
        "benchmark": "rollout",
        "model": "SmolLM2-135M-Instruct",
        "parameters": params,
        "generation_dtype": str(policy.inference_dtype).removeprefix("torch."),
        "workload": f"TextCraft test tasks, up to {args.turns} turns, {args.new_tokens} new tokens "
        "per turn, temperature 0.7, react format",
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch.__version__,
        },
        "fp32_gemm_gflops": round(fp32 / 1e9, 1),
        "bf16_gemm_gflops": round(bf16 / 1e9, 1),
        "roofline_tokens_per_s": round(roofline, 1),
        "engine": levels,
        "sequential_generate_loop": sequential,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
