"""The same short SFT run under glibc's default allocator settings and with a hint for
transparent huge pages (`GLIBC_TUNABLES=glibc.malloc.hugetlb=1`), alternating, in one run.

Training on a CPU allocates and frees large activation tensors every micro-batch; glibc serves
them with fresh mmaps, so each one is paid again in page faults. On some virtual machines a
fault costs far more than on bare metal. Each run is a separate `agenttrain sft` process (the
tunable is read at process start) on the same data and seed; the figure is the SFT trainer's
own `perf/tokens_per_s` per step, and the page faults are the child's minor faults.

Usage: python benchmarks/allocator.py --demos runs/textcraft-recipe/demos.jsonl
       [--limit 28] [--repeats 3] [--out benchmarks/results/allocator.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

VARIANTS = {"glibc default": "", "hugetlb=1": "glibc.malloc.hugetlb=1"}


def run_sft(demos: Path, limit: int, tunables: str, folder: Path) -> dict:
    """One `agenttrain sft` run: its steps' tokens/s, wall time and minor page faults."""
    env = {**os.environ, "GLIBC_TUNABLES": tunables} if tunables else dict(os.environ)
    command = [sys.executable, "-m", "agenttrain", "sft", "configs/textcraft_sft.yaml"]
    command += [f"data.train=[{demos}]", f"data.limit={limit}", "eval.after_training=false"]
    command += [f"run.out_dir={folder}", "trainer.save_freq=1000"]
    faults_before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt
    started = time.perf_counter()
    subprocess.run(command, env=env, check=True, capture_output=True)
    seconds = time.perf_counter() - started
    faults = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt - faults_before
    steps = [json.loads(line) for line in (folder / "metrics.jsonl").open()]
    speeds = [round(s["perf/tokens_per_s"], 1) for s in steps if "perf/tokens_per_s" in s]
    return {"tokens_per_s": speeds, "wall_s": round(seconds, 1), "minor_faults": faults}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demos", type=Path, required=True)
    parser.add_argument("--limit", type=int, default=28, help="conversations (28: 3 steps)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/allocator.json"))
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as scratch:
        for repeat in range(args.repeats):
            for name, tunables in VARIANTS.items():
                folder = Path(scratch) / f"{repeat}-{len(runs)}"
                runs.append({"variant": name, **run_sft(args.demos, args.limit, tunables, folder)})
                print(json.dumps(runs[-1]))
    medians = {
        name: median(v for r in runs if r["variant"] == name for v in r["tokens_per_s"])
        for name in VARIANTS
    }
    report = {
        "benchmark": "allocator",
        "workload": f"agenttrain sft configs/textcraft_sft.yaml on {args.limit} demonstrations",
        "cpus": os.cpu_count(),
        "runs": runs,
        "median_tokens_per_s": medians,
        "ratio": round(medians["hugetlb=1"] / medians["glibc default"], 3),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: report[k] for k in ("median_tokens_per_s", "ratio")}))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
