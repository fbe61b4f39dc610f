"""The CPU decoder's key/value cache: fp32 (before 2026-11-29) against the weights' bf16.

On a CPU with native bf16 the model generates in bf16, so its keys and values are bf16
values; the arena used to hold them in fp32, and decode steps attended a prefix shared by
all rows once (plain fp32 matrix products). Now the arena holds bf16 and a step is one
attention call over all rows (the bf16 matrix products of the split are slower on CPU than
the fused kernel). Both ways run the same evaluation in one process, alternating, as
benchmarks/continuous.py plays it (continuous batching on): time, tokens/s, the arena's
largest size, and how many episodes came out identical.

Usage: python benchmarks/kv_cache.py --model runs/textcraft-recipe/sft [--tasks 0-39] [-n 2]
       [--repeats 1] [--out F]
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

import torch

from agenttrain.policy import decoder as decoder_module
from continuous import (  # benchmarks/ is the folder
    eval_config,
    machine,
    run_once,
    workload,
    workload_arguments,
    write_report,
)

LARGEST_ARENA = {"bytes": 0}


@contextlib.contextmanager
def cache(kind: str) -> Iterator[None]:
    """Decoders built inside keep keys/values as `kind` says: "fp32" (the old way: an fp32
    arena, shared-prefix split attention) or "weights" (the current default)."""
    cls = decoder_module.LlamaFamilyDecoder
    init, reserve = cls.__init__, decoder_module.Arena.reserve

    def old_way(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        init(self, *args, **kwargs)
        self.cache_dtype, self.split_attention = torch.float32, True
        self.arena = decoder_module.Arena(
            len(self.layers),
            self.kv_heads,
            self.head_dim,
            torch.float32,
            self.device,
            self.arena.max_slots,
        )

    def measured(self, columns):  # type: ignore[no-untyped-def]
        reserve(self, columns)
        LARGEST_ARENA["bytes"] = max(LARGEST_ARENA["bytes"], self.nbytes)

    LARGEST_ARENA["bytes"] = 0
    decoder_module.Arena.reserve = measured  # type: ignore[method-assign]
    if kind == "fp32":
        cls.__init__ = old_way  # type: ignore[method-assign]
    try:
        yield
    finally:
        cls.__init__, decoder_module.Arena.reserve = init, reserve  # type: ignore[method-assign]


def main() -> None:
    args = workload_arguments(__doc__, "kv_cache.json")
    config = eval_config(args)
    runs, replies = [], {}
    for _ in range(args.repeats):
        for kind in ("fp32", "weights"):
            with cache(kind):
                run = run_once(config, streaming=True)
            replies[kind] = run.pop("_replies")
            run = {"cache": kind, **run, "largest_arena_gb": round(LARGEST_ARENA["bytes"] / 1e9, 2)}
            runs.append(run)
            print(json.dumps(run))
    same = sum(a == b for a, b in zip(replies["fp32"], replies["weights"], strict=True))
    best = {
        kind: min(r["seconds"] for r in runs if r["cache"] == kind) for kind in ("fp32", "weights")
    }
    report = {
        "benchmark": "kv_cache",
        "model": args.model,
        "workload": workload(args, "continuous batching, "),
        "machine": machine(),
        "runs": runs,
        "identical_episodes": f"{same} of {len(replies['weights'])}",
        "speedup_best_of_each": round(best["fp32"] / best["weights"], 3),
    }
    write_report(report, args.out)


if __name__ == "__main__":
    main()
