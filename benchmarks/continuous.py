"""Continuous batching against fixed batches: one evaluation, run both ways in one process.

Fixed batches: every turn of the episodes in flight decodes as one batch, and no result
comes back until its longest row ends, so short replies wait for long ones and the next
turns wait for the whole batch. Continuous: rows leave as they end, and an episode's next
turn joins the batch that is still decoding (`LlamaFamilyDecoder.stream` on CPU,
`GraphDecoder.stream` on a GPU).

The workload is an evaluation as `agenttrain eval` runs it (the checkpoint's recorded
settings, TextCraft test tasks, ReAct, the given turn and token limits and temperature);
the two ways alternate, `--repeats` times each, each into a folder of its own. Seeded
requests sample the same tokens in any batch, so both ways should play the same episodes:
the share that came out identical is reported (bf16 matmuls may round differently when
the rows beside a row change, and one changed token changes the rest of its episode).

Usage: python benchmarks/continuous.py [--model runs/textcraft-recipe/sft] [--tasks 0-39]
       [-n 2] [--concurrency 32] [--repeats 1] [--device cuda] [--out F]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from agenttrain.eval.runner import (
    EvalConfig,
    builtin_settings,
    evaluate,
    parse_ranges,
    recorded_settings,
)
from agenttrain.policy.hf import HFPolicy
from agenttrain.rollout import read_jsonl
from agenttrain.rollout.engine import RolloutConfig


def run_once(config: EvalConfig, streaming: bool) -> dict:
    """One evaluation with continuous batching on or off; its time and episodes."""
    policy_streams = HFPolicy.streams
    HFPolicy.streams = property(lambda policy: streaming and policy_streams.fget(policy))  # type: ignore[assignment]
    try:
        with tempfile.TemporaryDirectory() as folder:
            config = config.model_copy(update={"out": Path(folder)})
            started = time.perf_counter()
            [result] = evaluate(config)
            seconds = time.perf_counter() - started
            episodes = sorted(
                read_jsonl(next(Path(folder).glob("*/episodes.jsonl"))),
                key=lambda t: (t.task_id, t.seed, t.sample),
            )
    finally:
        HFPolicy.streams = policy_streams  # type: ignore[method-assign]
    tokens = sum(t.generated_tokens for t in episodes)
    return {
        "continuous": streaming,
        "seconds": round(seconds, 1),
        "episodes": len(episodes),
        "generated_tokens": tokens,
        "tokens_per_s": round(tokens / seconds, 1),
        "episodes_per_min": round(60 * len(episodes) / seconds, 2),
        "success": round(result.summary["success_rate"], 4),
        "_replies": [t.response_ids for t in episodes],
    }


def eval_config(args: argparse.Namespace) -> EvalConfig:
    """The evaluation `agenttrain eval` would run with these arguments (the checkpoint's
    recorded settings under the given limits)."""
    given = {"max_turns": args.max_turns, "max_new_tokens": args.max_new_tokens}
    settings = {**builtin_settings(), **recorded_settings([args.model], given), **given}
    return EvalConfig(
        env=settings.pop("env"),
        tasks=parse_ranges(args.tasks),
        models=[args.model],
        n=args.n,
        temperature=args.temperature,
        device=args.device,
        rollout=RolloutConfig(**settings, max_in_flight=args.concurrency),
    )


def workload_arguments(doc: str, result: str) -> argparse.Namespace:
    """The evaluation's options and where the report goes (benchmarks/results/<result>),
    shared with benchmarks/kv_cache.py."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--tasks", default="0-39", help="test-split positions")
    parser.add_argument("-n", type=int, default=2, help="samples per task")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--max-turns", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="cuda: the graph decoder streams")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / result)
    return parser.parse_args()


def pop_int_list(option: str, default: list[int]) -> list[int]:
    """`option 0,6` taken out of sys.argv (a benchmark's own option, not a workload one)."""
    if option not in sys.argv:
        return default
    at = sys.argv.index(option)
    values = [int(n) for n in sys.argv[at + 1].split(",")]
    del sys.argv[at : at + 2]
    return values


def workload(args: argparse.Namespace, batching: str = "") -> str:
    """The evaluation the runs played, in words (`batching`: a clause such as "continuous
    batching, ")."""
    return (
        f"agenttrain eval on TextCraft test tasks {args.tasks} x {args.n}, "
        f"{args.concurrency} in flight, {batching}up to {args.max_turns} turns of "
        f"{args.max_new_tokens} new tokens, T {args.temperature}"
    )


def machine() -> dict:
    return {
        "cpus": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


def main() -> None:
    args = workload_arguments(__doc__, "continuous.json")

    config = eval_config(args)
    runs = []
    for _ in range(args.repeats):
        for streaming in (False, True):
            runs.append(run_once(config, streaming))
            print(json.dumps({k: v for k, v in runs[-1].items() if not k.startswith("_")}))
    fixed = [r for r in runs if not r["continuous"]]
    ours = [r for r in runs if r["continuous"]]
    same = sum(a == b for a, b in zip(fixed[0]["_replies"], ours[0]["_replies"], strict=True))
    best = {
        way: min(group, key=lambda r: r["seconds"])
        for way, group in (("fixed", fixed), ("continuous", ours))
    }
    report = {
        "benchmark": "continuous",
        "model": args.model,
        "workload": workload(args),
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "machine": machine(),
        "runs": [{k: v for k, v in r.items() if not k.startswith("_")} for r in runs],
        "identical_episodes": f"{same} of {len(ours[0]['_replies'])}",
        "speedup_best_of_each": round(best["fixed"]["seconds"] / best["continuous"]["seconds"], 3),
    }
    write_report(report, args.out)


def write_report(report: dict[str, Any], out: Path) -> None:
    """The JSON result, and its two headline figures on the terminal."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: report[k] for k in ("identical_episodes", "speedup_best_of_each")}))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
