"""Throughput and latency of the TextCraft server under concurrent sessions.

Each simulated client loops create -> reset -> 5 steps -> close (the loop AgentGym-RL runs
per episode) for a fixed time. Reported per concurrency level: steps/s (only /step calls
count), requests/s, p50/p99 /step latency, and the server's RSS before and after.

The load generator is agenttrain's own client (`EnvServerPool`, what a rollout pays), in
one process on the same cores as the server, like the AgentGym reference measurement.

Usage: python benchmarks/env_server.py [--levels 1 8 32 128] [--seconds 10] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time
from pathlib import Path

from agenttrain.envs.textcraft.oracle import plan
from agenttrain.envs.textcraft.tasks import task
from agenttrain.serving.client import EnvServerPool
from agenttrain.serving.launch import start_server

STEPS_PER_EPISODE = 5


def actions_for(task_id: int) -> list[str]:
    """Five valid-looking actions: the oracle's first moves, padded with `inventory`."""
    moves = [p.action for p in plan(task(task_id).goal)][:STEPS_PER_EPISODE]
    return moves + ["inventory"] * (STEPS_PER_EPISODE - len(moves))


async def client(pool: EnvServerPool, worker: int, deadline: float, stats: dict) -> None:
    episode = 0
    while time.perf_counter() < deadline:
        task_id = (worker * 7919 + episode) % 544
        episode += 1
        async with pool.environment() as env:
            await env.reset(task_id)
            for action in stats["actions"][task_id]:
                started = time.perf_counter()
                await env.step(action)
                stats["latency"].append(time.perf_counter() - started)
        stats["requests"] += 3 + STEPS_PER_EPISODE
        stats["episodes"] += 1


async def run_level(url: str, clients: int, seconds: float, actions: dict) -> dict:
    stats = {"latency": [], "requests": 0, "episodes": 0, "actions": actions}
    deadline = time.perf_counter() + seconds
    started = time.perf_counter()
    async with EnvServerPool("textcraft", url) as pool:
        await asyncio.gather(*(client(pool, w, deadline, stats) for w in range(clients)))
    elapsed = time.perf_counter() - started
    latency = sorted(stats["latency"])
    quantiles = statistics.quantiles(latency, n=100, method="inclusive")
    return {
        "concurrent_sessions": clients,
        "seconds": round(elapsed, 2),
        "episodes": stats["episodes"],
        "steps_per_s": round(len(latency) / elapsed, 1),
        "requests_per_s": round(stats["requests"] / elapsed, 1),
        "step_latency_ms": {
            "p50": round(quantiles[49] * 1e3, 2),
            "p99": round(quantiles[98] * 1e3, 2),
            "max": round(latency[-1] * 1e3, 2),
        },
    }


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 8, 32, 128])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path(__file__).parent / "results" / "env_server.json"

    actions = {t: actions_for(t) for t in range(544)}
    server = start_server("textcraft", extra_args=["--max-sessions", "4096"])
    try:
        pid = server.process.pid
        asyncio.run(run_level(server.url, 4, 1.0, actions))  # warm-up
        rss_before = rss_mib(pid)
        levels = []
        for clients in args.levels:
            result = asyncio.run(run_level(server.url, clients, args.seconds, actions))
            result["server_rss_mib_after"] = rss_mib(pid)
            levels.append(result)
            print(json.dumps(result))
        report = {
            "benchmark": "env_server",
            "loop": f"create -> reset -> {STEPS_PER_EPISODE} steps -> close",
            "client": "agenttrain EnvServerPool (aiohttp)",
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "server_rss_mib_before": rss_before,
            "server_rss_mib_after": rss_mib(pid),
            "levels": levels,
        }
    finally:
        server.stop()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
