"""One evaluation played by 1 process using every thread against N processes with a share of
the threads each (`agenttrain eval --workers N`), in one run, alternating.

On a CPU a small model's decode step is bound by per-step work that PyTorch's intra-op threads
barely split, so processes that each decode their own rows use the cores better. The time is
the whole evaluation's wall clock, the workers' start-up and model loading included; tokens
are the episodes' generated tokens. Each row samples from its own seeded stream, so the
episodes may come out identical; batch composition can still change a float's last bit.

Usage: python benchmarks/eval_workers.py --model runs/textcraft-recipe/sft/checkpoints/step-17
       [--tasks 0-39] [-n 2] [--workers 1,2] [--repeats 1] [--out F]
"""

from __future__ import annotations

import json

from continuous import (
    eval_config,
    machine,
    pop_int_list,
    run_once,
    workload,
    workload_arguments,
    write_report,
)


def main() -> None:
    counts = pop_int_list("--workers", [1, 2])
    args = workload_arguments(__doc__, "eval_workers.json")
    config = eval_config(args)
    runs, replies = [], {}
    for _ in range(args.repeats):
        for workers in counts:
            run = run_once(config.model_copy(update={"workers": workers}), streaming=True)
            replies.setdefault(workers, run.pop("_replies"))
            runs.append({"workers": workers, **run})
            print(json.dumps(runs[-1]))
    best = {n: max(r["tokens_per_s"] for r in runs if r["workers"] == n) for n in counts}
    first = replies[counts[0]]
    report = {
        "benchmark": "eval_workers",
        "model": args.model,
        "workload": workload(args, "continuous batching, ") + " (in flight: per worker)",
        "machine": machine(),
        "runs": runs,
        "identical_episodes": {
            str(n): sum(a == b for a, b in zip(first, replies[n], strict=True)) for n in counts
        },
        "speedup_best_of_each": {str(n): round(best[n] / best[counts[0]], 3) for n in counts[1:]},
    }
    write_report(report, args.out)


if __name__ == "__main__":
    main()
