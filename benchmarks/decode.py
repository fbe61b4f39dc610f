"""Decode throughput: agenttrain's decode paths against transformers' static-cache `generate`.

Both sides run in one process, on the same device, the same prompts (TextCraft first
observations in the chat template) and the same token count (every row generates exactly
`--new-tokens`: stop tokens are switched off on both sides), temperature 0.7:
- `anchor`: transformers `generate(cache_implementation="static")`, left-padded batch; the
  2nd call is timed. transformers compiles a static-cache forward itself on CUDA
  (`mode="reduce-overhead"`: CUDA graphs); compiling it here as well fails at the 2nd call
  ("accessing tensor output of CUDAGraphs that has been overwritten", transformers 5.17);
- `anchor_explicit` (rows in `--explicit-anchor-rows`): the same call on a copy of the model
  whose forward is compiled here (`mode="reduce-overhead", fullgraph=True`) with transformers'
  own compile switched off: the set-up of the 2026-11-24 H100 figures (7,825 tok/s at 32 rows
  against 3,346 for `anchor` on an H200 with transformers 5.17), so the stronger anchor is known;
- `graph`: agenttrain's static-shape decode step (CUDA graphs and a compiled step on a GPU,
  eager elsewhere); `graph_eager`: the same without `torch.compile` (CUDA graphs only);
- `arena`: agenttrain's CPU-tuned decoder (for reference);
- `graph` over `--turns` turns: each turn appends the reply and a fixed observation and
  continues the same episodes (keys/values reused), the multi-turn rate. The same turns over
  other episodes run first as its warm-up (before 2026-11-26's second H200 run the warm-up was
  one single-turn call, so captures for the longer contexts of later turns were timed).
Reported: generated tokens/s (warm call), the warm-up call's seconds (compile/capture); for
multi-turn runs each timed run's seconds per turn (`turns_s`), and the collections Python's
cyclic collector made during the timed runs (`gc_collections`): on an H200 the first timed
6-turn run took 3.2-3.9 s and a later one 2.1 s, unexplained.
`--profile DIR` writes a torch.profiler table of each of our timed calls (by device time).

With `--lora R` the model is wrapped in a rank-R LoRA adapter on all linear layers (a random
update, as a policy trained from an SFT checkpoint carries), and the default decode path runs
twice per row count: `lora_merged` (what agenttrain does: generation from W + ΔW) and
`lora_unmerged` (the decoder over the adapter model, as before), alternating, one process.

Usage: python benchmarks/decode.py --device cuda [--rows 32 128 256] [--new-tokens 96]
       [--turns 6] [--model smollm2-135m|<model folder>] [--lora 32] [--out F] [--profile DIR]
On CPU (a smoke run): python benchmarks/decode.py --device cpu --rows 4 --no-anchor-compile
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import gc
import json
import platform
import statistics
import time
import traceback
from pathlib import Path

import torch

from agenttrain.envs import get_spec, make_env
from agenttrain.policy.base import GenerationRequest, SamplingParams
from agenttrain.policy.chat import ChatTemplate
from agenttrain.policy.hf import HFPolicy
from agenttrain.policy.models import load_hf, resolve

GENERATION = {"inference_dtype": "auto"}
"""As the trainer generates (`model.generation_dtype: auto`): bf16 on CUDA. HFPolicy's own
default is float32, which until 2026-11-26 made these figures float32 against a bf16 anchor."""
OBSERVATION = "Crafted 1 minecraft:oak_planks. Inventory: [oak planks] (4), [stick] (2)."


def prompts(tokenizer, rows: int) -> list[list[int]]:
    """Chat-template prompts of TextCraft's first observations, one task per row."""
    spec = get_spec("textcraft")
    start = [m.to_dict() for m in spec.conversation_start]
    template = ChatTemplate(tokenizer)
    tasks = list(spec.split("test"))
    env = make_env("textcraft")
    out = []
    for row in range(rows):
        first = asyncio.run(env.reset(tasks[row % len(tasks)]))
        out.append(template.prompt_ids([*start, {"role": "user", "content": first.text}]))
    return out


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device: torch.device, call):
    """(seconds, result) of `call()`, with the device drained on both ends."""
    sync(device)
    started = time.perf_counter()
    result = call()
    sync(device)
    return time.perf_counter() - started, result


def anchor(
    model, tokenizer, batch, new_tokens, compile_forward: bool, repeats: int, explicit=False
) -> dict:
    """transformers' static-cache generate (compiled by transformers unless told not to, or
    `explicit`: a copy whose forward is compiled here): warm-up call, then the timed call."""
    device = next(model.parameters()).device
    if explicit:
        model = copy.deepcopy(model)
        model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
        compile_forward = False  # transformers' own compile off: one compile, ours
    width = max(len(p) for p in batch)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in batch], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch], device=device)
    kwargs = dict(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=True,
        temperature=0.7,
        top_p=1.0,
        top_k=0,
        cache_implementation="static",
        disable_compile=not compile_forward,
        pad_token_id=pad,
    )
    with torch.inference_mode():
        warmup, _ = timed(device, lambda: model.generate(**kwargs))
        runs = [timed(device, lambda: model.generate(**kwargs))[0] for _ in range(repeats)]
    return summary(warmup, runs, len(batch) * new_tokens)


def summary(warmup: float, runs: list[float], tokens: int) -> dict:
    """The median of the timed calls (single calls of 0.3 s varied up to 2x between runs on
    an H200), with every call's seconds."""
    return {
        "warmup_s": round(warmup, 2),
        "seconds": round(statistics.median(runs), 3),
        "runs_s": [round(r, 3) for r in runs],
        "tokens": tokens,
    }


def play(policy, batch, params, turns: int, name: str) -> tuple[float, int, list[float]]:
    """Seconds, tokens and each turn's seconds of `turns` generate calls over the same
    episodes (keys reused): each turn appends the reply and a fixed observation."""
    device = policy.device
    observation = policy.template.user_turn_ids(OBSERVATION)
    current = [list(p) for p in batch]
    turn_seconds, tokens = [], 0
    for turn in range(turns):
        requests = [
            GenerationRequest(p, key=f"{name}{i}", seed=turn) for i, p in enumerate(current)
        ]
        spent, results = timed(device, lambda r=requests: policy.generate(r, params))
        turn_seconds.append(spent)
        tokens += sum(len(r.token_ids) for r in results)
        current = [p + r.token_ids + observation for p, r in zip(current, results, strict=True)]
    for i in range(len(batch)):
        policy.release(f"{name}{i}")
    return sum(turn_seconds), tokens, turn_seconds


def gc_collections() -> int:
    """Collections of Python's cyclic collector so far, all generations."""
    return sum(generation["collections"] for generation in gc.get_stats())


def agenttrain_run(
    policy, batch, new_tokens, turns: int = 1, repeats: int = 1, profile: Path | None = None
):
    """The same `turns` over other episodes as a warm-up (captures and compiles for every
    context width the turns reach happen there), then timed; `profile`: a torch.profiler
    table of the timed turns, sorted by device time."""
    policy.decoder.stop_ids = frozenset()  # every row generates exactly new_tokens
    params = SamplingParams(temperature=0.7, max_new_tokens=new_tokens)
    warmup, *_ = play(policy, batch, params, turns, "w")
    if profile is None:
        collections = gc_collections()
        runs = [play(policy, batch, params, turns, f"e{i}_") for i in range(repeats)]
        result = summary(warmup, [seconds for seconds, *_ in runs], runs[0][1])
        if turns > 1:  # which turns are slow, and whether Python's collector ran meanwhile
            result["turns_s"] = [[round(t, 3) for t in turn_s] for *_, turn_s in runs]
        return {**result, "gc_collections": gc_collections() - collections}
    seconds, tokens = profiled(policy, batch, params, turns, profile)
    return {**summary(warmup, [seconds], tokens), "profiled": True}


def profiled(policy, batch, params, turns: int, profile: Path) -> tuple[float, int]:
    """`play` once with its phases clocked, then once under torch.profiler: a table by device
    time (by CPU time off CUDA) written to `profile`. The profiled call's seconds and tokens
    (the profiler slows what it watches: not a speed figure)."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if policy.device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with phase_clock(policy.decoder) as phases:  # a plain timed call first, by phase
        play(policy, batch, params, turns, "p")
    with torch.profiler.profile(activities=activities) as profiler:
        seconds, tokens, _ = play(policy, batch, params, turns, "e")
    order = "self_cuda_time_total" if policy.device.type == "cuda" else "self_cpu_time_total"
    table = profiler.key_averages().table(sort_by=order, row_limit=40, max_name_column_width=70)
    profile.parent.mkdir(parents=True, exist_ok=True)
    clock = "\n".join(f"{name:>12}: {spent:.4f} s" for name, spent in phases.items())
    profile.write_text(f"seconds by phase (device drained at each end):\n{clock}\n\n{table}")
    print(f"wrote {profile}\n{clock}", flush=True)
    return seconds, tokens


@contextlib.contextmanager
def phase_clock(decoder, names=("_prefill", "_start_rows", "_decode", "_collect")):
    """Seconds spent in each of the decoder's phases (device drained around each), summed
    over the calls made inside the block: where a call's time goes, prefill or decode."""
    device = decoder.device
    phases = dict.fromkeys(names, 0.0)

    def clocked(name, method):
        def call(*args, **kwargs):
            spent, result = timed(device, lambda: method(*args, **kwargs))
            phases[name] += spent
            return result

        return call

    for name in names:
        setattr(decoder, name, clocked(name, getattr(decoder, name)))
    try:
        yield phases
    finally:
        for name in names:
            delattr(decoder, name)  # the class's methods again


class UnmergedLoraPolicy(HFPolicy):
    """Decodes through the adapter layers (agenttrain before it merged them)."""

    @staticmethod
    def _generation_copy(model, dtype, own_dtype):
        return copy.deepcopy(model).to(dtype).eval()


def with_lora(model, rank: int):
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=rank, lora_alpha=2 * rank, target_modules="all-linear", task_type="CAUSAL_LM"
    )
    model = get_peft_model(model, config)
    for name, parameter in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(parameter, std=0.01)
    return model.eval()


def lora_rows(model, tokenizer, batch, args, path: str) -> dict:
    """Merged vs unmerged LoRA decoding, alternating (merged, unmerged, merged, unmerged)."""
    slots = max(len(batch), 32)
    runs: dict[str, list[float]] = {"lora_merged": [], "lora_unmerged": []}
    for _ in range(2):
        for key, kind in (("lora_merged", HFPolicy), ("lora_unmerged", UnmergedLoraPolicy)):
            policy = kind(
                model, tokenizer, name="lora", decode=path, cache_slots=slots, **GENERATION
            )
            runs[key].append(rate(agenttrain_run(policy, batch, args.new_tokens))["tokens_per_s"])
            del policy
    row = {key: {"tokens_per_s": max(values), "runs": values} for key, values in runs.items()}
    merged, unmerged = (row[k]["tokens_per_s"] for k in ("lora_merged", "lora_unmerged"))
    return {**row, "merged_vs_unmerged": round(merged / unmerged, 3)}


def path_rows(model, tokenizer, batch, args, path: str, slots: int) -> dict:
    """One decode path: a single turn, then (graph path) `args.turns` turns over the same keys."""
    decode, compile_step = ("graph", False) if path == "graph_eager" else (path, None)
    policy = HFPolicy(
        model,
        tokenizer,
        name=args.model,
        decode=decode,
        cache_slots=slots,
        compile_step=compile_step,
        **GENERATION,
    )
    rows = len(batch)
    profile = args.profile and args.profile / f"{path}_{rows}_rows_1_turn.txt"
    row = {path: rate(agenttrain_run(policy, batch, args.new_tokens, 1, args.repeats, profile))}
    if path == "graph" and args.turns > 1:
        profile = args.profile and args.profile / f"{path}_{rows}_rows_{args.turns}_turns.txt"
        row[f"graph_{args.turns}_turns"] = rate(
            agenttrain_run(policy, batch, args.new_tokens, args.turns, args.repeats, profile)
        )
        row["graph_stats"] = dict(policy.decoder.stats)
    return row


def rate(result: dict) -> dict:
    return {**result, "tokens_per_s": round(result["tokens"] / result["seconds"], 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--rows", type=int, nargs="+", default=[32, 128, 256])
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3, help="timed calls; the median is kept")
    parser.add_argument("--no-anchor", action="store_true")
    parser.add_argument("--no-anchor-compile", action="store_true", help="e.g. on CPU")
    parser.add_argument("--no-arena", action="store_true", help="skip the CPU-tuned decoder")
    parser.add_argument("--no-graph-eager", action="store_true", help="skip graph_eager")
    parser.add_argument("--explicit-anchor-rows", type=int, nargs="*", default=[], metavar="N")
    parser.add_argument("--lora", type=int, metavar="R", help="LoRA merged vs unmerged only")
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--profile", type=Path, metavar="DIR", help="torch.profiler tables of our timed calls"
    )
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    model, tokenizer = load_hf(resolve(args.model), device=args.device)
    model.eval()
    results = []
    for rows in args.rows:
        batch = prompts(tokenizer, rows)
        row: dict = {"rows": rows, "mean_prompt_tokens": round(sum(map(len, batch)) / rows, 1)}
        if args.lora:
            path = "graph" if device.type == "cuda" else "arena"
            lora_model = with_lora(copy.deepcopy(model), args.lora)
            row.update(lora_rows(lora_model, tokenizer, batch, args, path))
            print(json.dumps(row), flush=True)
            results.append(row)
            write_report(args, model, device, results)
            continue
        if not args.no_anchor:  # first, so that a failing path of ours cannot spoil it
            try:
                row["anchor"] = rate(
                    anchor(
                        model,
                        tokenizer,
                        batch,
                        args.new_tokens,
                        not args.no_anchor_compile,
                        args.repeats,
                    )
                )
            except Exception as error:
                row["anchor_error"] = f"{type(error).__name__}: {error}"
                traceback.print_exc()
        if rows in args.explicit_anchor_rows:
            try:
                row["anchor_explicit"] = rate(
                    anchor(
                        model, tokenizer, batch, args.new_tokens, True, args.repeats, explicit=True
                    )
                )
            except Exception as error:
                row["anchor_explicit_error"] = f"{type(error).__name__}: {error}"
                traceback.print_exc()
        slots = max(rows, 32)
        skipped = {"arena": args.no_arena, "graph_eager": args.no_graph_eager}
        for path in ("graph", "graph_eager", "arena"):
            if skipped.get(path):
                continue
            try:
                row.update(path_rows(model, tokenizer, batch, args, path, slots))
            except Exception as error:  # one path's failure is that path's row, not the run's
                row[f"{path}_error"] = f"{type(error).__name__}: {error}"
                traceback.print_exc()
        for ours, theirs in (
            ("graph", "anchor"),
            ("graph", "anchor_explicit"),
            ("graph", "graph_eager"),
        ):
            if ours in row and theirs in row:
                row[f"{ours}_vs_{theirs}"] = round(
                    row[ours]["tokens_per_s"] / row[theirs]["tokens_per_s"], 3
                )
        print(json.dumps(row), flush=True)
        results.append(row)
        write_report(args, model, device, results)  # after every row: a killed run keeps them


def write_report(args, model, device: torch.device, results: list[dict]) -> None:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
    report = {
        "benchmark": "decode",
        "model": args.model,
        "device": name or args.device,
        "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        "generation_dtype": GENERATION["inference_dtype"],
        "new_tokens": args.new_tokens,
        "lora_rank": args.lora,
        "torch": torch.__version__,
        "workload": "TextCraft first observations as prompts, exactly new_tokens per row, "
        "temperature 0.7; tokens/s of the warm call",
        "results": results,
    }
    stem = f"decode_lora_{device.type}" if args.lora else f"decode_{device.type}"
    out = args.out or Path(__file__).parent / "results" / f"{stem}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}", flush=True)


if __name__ == "__main__":
    main()
