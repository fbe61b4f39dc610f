"""Seconds per GRPO update and peak RSS: agenttrain vs TRL's GRPOTrainer, same batch.

The batch is real: 16 TextCraft episodes (4 tasks x 4 samples) recorded once with SmolLM2-135M
through agenttrain's engine (multi-turn, environment tokens masked out of the loss). Scores are
fixed (1 for the first sample of each group, else 0) so advantages are non-zero. Both sides do
one update: forward, backward over every micro-batch, gradient clipping, AdamW step; same model,
same LoRA (r=16, alpha=32, all linear layers) or full weights, same precision, same token-mean
loss (TRL: loss_type="dapo"; env tokens excluded through TRL's `tool_mask`), no KL.

Each variant runs in its own process so that peak RSS (ru_maxrss) is its own. TRL is an
optional benchmark dependency: pip install 'agenttrain[bench]'.

Usage: python benchmarks/train_step.py [--repeats 3] [--precision auto|float32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
BATCH = RESULTS / "train_step_batch.jsonl"
VARIANTS = ("agenttrain-lora", "trl-lora", "agenttrain-full", "trl-full")
MICRO_TOKENS = int(os.environ.get("MICRO_TOKENS", "1024"))
"""agenttrain's micro-batch token budget (1024: one ~1000-token episode per micro-batch)."""
TRL_MICRO = int(os.environ.get("TRL_MICRO", "1"))
"""Episodes per TRL micro-batch (1: the same one-episode micro-batches)."""


def record_batch() -> None:
    """16 TextCraft episodes from SmolLM2 (recorded once, then reused)."""
    from agenttrain.agent.formats import get_format
    from agenttrain.envs import get_spec, make_env
    from agenttrain.policy.base import SamplingParams
    from agenttrain.policy.loader import load_policy
    from agenttrain.rollout import EpisodeRequest, RolloutConfig, RolloutEngine, write_jsonl

    spec = get_spec("textcraft")
    policy = load_policy(
        "smollm2-135m", env="textcraft", action_format=get_format("react", "textcraft")
    )
    config = RolloutConfig(max_turns=6, max_new_tokens=96, max_format_errors=6)
    engine = RolloutEngine(
        policy,
        spec,
        lambda: make_env("textcraft"),
        config,
        SamplingParams(temperature=1.0, max_new_tokens=96),
    )
    tasks = spec.split("train")[:4]
    requests = [EpisodeRequest(t, f"g{t}", sample=s, seed=0) for t in tasks for s in range(4)]
    write_jsonl(BATCH, asyncio.run(engine.run(requests)))


def load_batch() -> tuple[list, list[float]]:
    from agenttrain.rollout import read_jsonl

    episodes = list(read_jsonl(BATCH))
    scores = [1.0 if episode.sample == 0 else 0.0 for episode in episodes]
    return episodes, scores


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_agenttrain(lora: bool, precision: str, repeats: int) -> list[float]:
    from agenttrain.config import load
    from agenttrain.rl.config import TrainConfig
    from agenttrain.rl.trainer import Trainer

    episodes, scores = load_batch()
    out = Path(tempfile.mkdtemp())
    config = load(
        TrainConfig,
        None,
        [
            "env.name=textcraft",
            f"run.out_dir={out}",
            f"model.lora.enabled={str(lora).lower()}",
            f"model.train_dtype={'auto' if precision == 'auto' else 'float32'}",
            "data.batch_tasks=4",
            "data.group_size=4",
            f"actor.micro_batch_tokens={MICRO_TOKENS}",
            "actor.lr=1e-5",
        ],
    )
    trainer = Trainer(config)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        trainer.update.learn(episodes, scores, {})
        times.append(time.perf_counter() - started)
    return times


def run_trl(lora: bool, precision: str, repeats: int) -> list[float]:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOConfig, GRPOTrainer

    from agenttrain.policy.models import load_hf, resolve

    episodes, scores = load_batch()
    model, tokenizer = load_hf(resolve("smollm2-135m"))
    bf16 = precision == "auto"
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(),
        per_device_train_batch_size=16,
        num_generations=4,
        use_cpu=True,
        bf16=bf16,
        beta=0.0,
        loss_type="dapo",
        report_to=[],
        max_grad_norm=1.0,
        learning_rate=1e-5,
    )
    peft_config = (
        LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM")
        if lora
        else None
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["x"] * 16}),
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    model = trainer.model
    trainer.current_gradient_accumulation_steps = 1  # set by TRL's own loop; one pass here
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-5)
    # TRL's input layout: left-padded prompts, right-padded completions, per-sequence advantages.
    pad = tokenizer.pad_token_id
    prompt_width = max(len(e.prompt_ids) for e in episodes)
    completion_width = max(len(e.response_ids) for e in episodes)
    prompt_ids = torch.full((16, prompt_width), pad)
    prompt_mask = torch.zeros(16, prompt_width, dtype=torch.long)
    completion_ids = torch.full((16, completion_width), pad)
    completion_mask = torch.zeros(16, completion_width, dtype=torch.long)
    tool_mask = torch.zeros(16, completion_width, dtype=torch.long)
    for row, episode in enumerate(episodes):
        n = len(episode.prompt_ids)
        prompt_ids[row, prompt_width - n :] = torch.tensor(episode.prompt_ids)
        prompt_mask[row, prompt_width - n :] = 1
        m = len(episode.response_ids)
        completion_ids[row, :m] = torch.tensor(episode.response_ids)
        completion_mask[row, :m] = 1
        tool_mask[row, :m] = torch.tensor(episode.response_mask)
    grouped = torch.tensor(scores).view(4, 4)
    advantages = (
        (grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)
    ).view(-1)
    micro = TRL_MICRO
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        optimizer.zero_grad()
        for start in range(0, 16, micro):
            rows = slice(start, start + micro)
            inputs = {
                "prompt_ids": prompt_ids[rows],
                "prompt_mask": prompt_mask[rows],
                "completion_ids": completion_ids[rows],
                "completion_mask": completion_mask[rows],
                "tool_mask": tool_mask[rows],
                "advantages": advantages[rows],
                "num_items_in_batch": tool_mask.sum().float(),
            }
            with trainer.accelerator.autocast():
                loss = trainer.compute_loss(model, inputs)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        times.append(time.perf_counter() - started)
    return times


def child(variant: str, precision: str, repeats: int) -> None:
    runner = run_agenttrain if variant.startswith("agenttrain") else run_trl
    times = runner(variant.endswith("lora"), precision, repeats)
    print(
        json.dumps(
            {
                "variant": variant,
                "seconds": [round(t, 2) for t in times],
                "median_s": round(sorted(times)[len(times) // 2], 2),
                "peak_rss_mib": round(peak_rss_mib(), 1),
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--precision", choices=["auto", "float32"], default="auto")
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=RESULTS / "train_step.json")
    args = parser.parse_args()
    if args.variant:
        child(args.variant, args.precision, args.repeats)
        return
    if not BATCH.exists():
        record_batch()
    episodes, _ = load_batch()
    shape = {
        "episodes": len(episodes),
        "prompt_tokens_mean": sum(len(e.prompt_ids) for e in episodes) / len(episodes),
        "response_tokens_mean": sum(len(e.response_ids) for e in episodes) / len(episodes),
        "model_tokens_mean": sum(sum(e.response_mask) for e in episodes) / len(episodes),
    }
    print(json.dumps(shape))
    results = []
    for variant in VARIANTS:
        output = subprocess.run(
            [
                sys.executable,
                __file__,
                "--variant",
                variant,
                "--precision",
                args.precision,
                "--repeats",
                str(args.repeats),
            ],
            capture_output=True,
            text=True,
            env={**os.environ},
        )
        line = next((x for x in output.stdout.splitlines() if x.startswith("{")), None)
        if output.returncode != 0 or line is None:
            results.append({"variant": variant, "error": output.stderr[-1500:]})
        else:
            results.append(json.loads(line))
        print(json.dumps(results[-1])[:400])
    report = {
        "benchmark": "train_step",
        "precision": args.precision,
        "batch": shape,
        "repeats": args.repeats,
        "results": results,
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
