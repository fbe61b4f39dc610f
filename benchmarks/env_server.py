"""Throughput, latency and server CPU per request of AgentGym-compatible TextCraft servers.

Each simulated client loops create -> reset -> 5 steps -> close (the loop AgentGym-RL runs
per episode) for a fixed time. Reported per server and concurrency level: steps/s (only
/step calls count), requests/s, p50/p99 /step latency, and the server's CPU time per
request from /proc/<pid>/stat (utime + stime of all its threads) with its RSS.

Steps/s depends on the load client as much as on the server (both share this machine's
cores); CPU per request does not. So `--against URL` drives a second server, e.g.
AgentGym's own, with the SAME client in the SAME run, level by level, and the comparison
is made on both figures. Its pid comes from `--against-pid`, or from the process that
listens on the URL's loopback port; when neither works only client-side figures are given.

Actions are the oracle's first moves for the goal the server names in its first
observation (padded with `inventory`), so both servers get valid moves for their own goal
even where their task ids name different goals.

Usage: python benchmarks/env_server.py [--levels 1 8 32 128] [--seconds 10] [--out FILE]
           [--against URL [--against-pid PID] [--against-name NAME]]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from agenttrain.envs.textcraft.oracle import goal_from_observation, plan
from agenttrain.envs.textcraft.tasks import num_tasks, task
from agenttrain.serving.client import EnvServerPool
from agenttrain.serving.errors import EnvServerError
from agenttrain.serving.launch import start_server

STEPS_PER_EPISODE = 5
REQUESTS_PER_EPISODE = 3 + STEPS_PER_EPISODE  # create, reset, steps, close
CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}


@dataclass
class Target:
    """One server under load; `pid` is None when its CPU time cannot be read."""

    name: str
    url: str
    pid: int | None
    pid_source: str


def actions_by_goal() -> dict[str, list[str]]:
    """Five valid-looking actions per goal: the oracle's first moves, padded with `inventory`."""
    table = {}
    for task_id in range(num_tasks()):
        goal = task(task_id).goal
        moves = [p.action for p in plan(goal)][:STEPS_PER_EPISODE]
        table[goal] = moves + ["inventory"] * (STEPS_PER_EPISODE - len(moves))
    return table


async def client(pool: EnvServerPool, worker: int, deadline: float, stats: dict) -> None:
    episode = 0
    while time.perf_counter() < deadline:
        task_id = (worker * 7919 + episode) % num_tasks()
        episode += 1
        try:
            async with pool.environment() as env:
                first = await env.reset(task_id)
                for action in stats["actions"][goal_from_observation(first.text)]:
                    started = time.perf_counter()
                    result = await env.step(action)
                    stats["latency"].append(time.perf_counter() - started)
            stats["solved"] += result.reward == 1
        except EnvServerError:  # counted, not hidden: a server that errs does less work
            stats["failed_episodes"] += 1
            continue
        stats["requests"] += REQUESTS_PER_EPISODE
        stats["episodes"] += 1


@dataclass
class Usage:
    """Wall clock, this process's CPU time and the server's CPU time at one instant."""

    wall_s: float
    client_cpu_s: float
    server_cpu_s: float | None

    @classmethod
    def now(cls, server_pid: int | None) -> Usage:
        return cls(time.perf_counter(), time.process_time(), cpu_seconds(server_pid))


async def load(target: Target, clients: int, seconds: float, actions: dict) -> dict:
    """Drive one server; usage is read after the pool's identity check, around the load only."""
    stats = {
        "latency": [],
        "requests": 0,
        "episodes": 0,
        "solved": 0,
        "failed_episodes": 0,
        "actions": actions,
    }
    async with EnvServerPool("textcraft", target.url) as pool:
        await pool.verify()  # AgentGym's server: its task table is read or spot-checked here
        stats["before"] = Usage.now(target.pid)
        deadline = time.perf_counter() + seconds
        await asyncio.gather(*(client(pool, w, deadline, stats) for w in range(clients)))
        stats["after"] = Usage.now(target.pid)
    return stats


def run_level(target: Target, clients: int, seconds: float, actions: dict) -> dict:
    """One load run against one server, with the server's and the client's CPU time."""
    load_before = os.getloadavg()[0]
    stats = asyncio.run(load(target, clients, seconds, actions))
    before, after = stats["before"], stats["after"]
    elapsed = after.wall_s - before.wall_s
    server_cpu = None
    if before.server_cpu_s is not None and after.server_cpu_s is not None:
        server_cpu = after.server_cpu_s - before.server_cpu_s
    client_cpu = after.client_cpu_s - before.client_cpu_s
    latency = sorted(stats["latency"])
    requests = stats["requests"]
    return {
        "server": target.name,
        "concurrent_sessions": clients,
        "seconds": round(elapsed, 2),
        "episodes": stats["episodes"],
        "episodes_solved_in_5_steps": stats["solved"],
        "failed_episodes": stats["failed_episodes"],
        "steps_per_s": round(len(latency) / elapsed, 1),
        "requests_per_s": round(requests / elapsed, 1),
        "step_latency_ms": latency_ms(latency),
        "server_cpu_s": None if server_cpu is None else round(server_cpu, 2),
        "server_cpu_ms_per_request": per_request_ms(server_cpu, requests),
        "server_cpu_busy": None if server_cpu is None else round(server_cpu / elapsed, 2),
        "server_rss_mib_after": rss_mib(target.pid),
        "client_cpu_ms_per_request": per_request_ms(client_cpu, requests),
        "loadavg_1min_before": round(load_before, 2),
    }


def latency_ms(latency: list[float]) -> dict[str, float] | None:
    """p50, p99 and max of sorted latencies; None when too few steps succeeded."""
    if len(latency) < 2:
        return None
    quantiles = statistics.quantiles(latency, n=100, method="inclusive")
    return {
        "p50": round(quantiles[49] * 1e3, 2),
        "p99": round(quantiles[98] * 1e3, 2),
        "max": round(latency[-1] * 1e3, 2),
    }


def per_request_ms(cpu_s: float | None, requests: int) -> float | None:
    return None if cpu_s is None or not requests else round(cpu_s / requests * 1e3, 3)


def cpu_seconds(pid: int | None) -> float | None:
    """utime + stime of a process and all its threads (fields 14 and 15 of /proc/pid/stat)."""
    if pid is None:
        return None
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()  # the name in parentheses may hold spaces
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_S


def rss_mib(pid: int | None) -> float | None:
    if pid is None:
        return None
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return None


def listening_pid(port: int) -> int | None:
    """The process holding a listening TCP socket on `port`, found via /proc/net and fds."""
    sockets = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with_header = Path(table).read_text().splitlines() if Path(table).exists() else []
        for row in with_header[1:]:
            fields = row.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                sockets.add(f"socket:[{inode}]")
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            if any(os.readlink(fd) in sockets for fd in fd_dir.iterdir()):
                return int(fd_dir.parent.name)
        except OSError:  # another user's process, or one that just exited
            continue
    return None


def against_target(url: str, pid: int | None, name: str) -> Target:
    if pid is not None:
        return Target(name, url, pid, "--against-pid")
    parts = urlsplit(url)
    if parts.hostname not in LOOPBACK_HOSTS:
        return Target(name, url, None, f"not found: {parts.hostname} is not loopback")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    found = listening_pid(port)
    if found is None:
        return Target(name, url, None, f"not found: no readable process listens on port {port}")
    return Target(name, url, found, f"listening socket on port {port}")


def ratios(levels: list[dict], ours: str, other: str) -> list[dict]:
    """Per level: how many times more steps/s ours serves, and how much less CPU per request."""
    by_key = {(r["server"], r["concurrent_sessions"]): r for r in levels}
    rows = []
    for (server, clients), mine in by_key.items():
        theirs = by_key.get((other, clients))
        if server != ours or theirs is None:
            continue
        cpu_ratio = None
        if mine["server_cpu_ms_per_request"] and theirs["server_cpu_ms_per_request"]:
            cpu_ratio = theirs["server_cpu_ms_per_request"] / mine["server_cpu_ms_per_request"]
        rows.append(
            {
                "concurrent_sessions": clients,
                "steps_per_s": round(mine["steps_per_s"] / max(theirs["steps_per_s"], 0.1), 2),
                "server_cpu_per_request": None if cpu_ratio is None else round(cpu_ratio, 2),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 8, 32, 128])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--against", help="URL of another AgentGym-compatible TextCraft server")
    parser.add_argument("--against-pid", type=int, help="pid of that server (for its CPU time)")
    parser.add_argument("--against-name", default="against", help="label of that server")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path(__file__).parent / "results" / "env_server.json"

    actions = actions_by_goal()
    server = start_server("textcraft", extra_args=["--max-sessions", "4096"])
    try:
        targets = [Target("agenttrain", server.url, server.process.pid, "started here")]
        if args.against:
            targets.append(against_target(args.against, args.against_pid, args.against_name))
        for target in targets:
            if target.pid is None:
                print(f"{target.name}: server pid {target.pid_source}; client-side figures only")
            asyncio.run(load(target, 4, 1.0, actions))  # warm-up
        rss_before = {t.name: rss_mib(t.pid) for t in targets}
        levels = []
        for clients in args.levels:
            for target in targets:
                result = run_level(target, clients, args.seconds, actions)
                levels.append(result)
                print(json.dumps(result))
        report = {
            "benchmark": "env_server",
            "loop": f"create -> reset -> {STEPS_PER_EPISODE} steps -> close",
            "client": "agenttrain EnvServerPool (aiohttp), one process, for every server",
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "servers": [
                {
                    "name": t.name,
                    "url": t.url,
                    "pid": t.pid,
                    "pid_source": t.pid_source,
                    "rss_mib_before": rss_before[t.name],
                }
                for t in targets
            ],
            "levels": levels,
        }
        if args.against:
            report["ratios"] = {
                "of": f"agenttrain over {args.against_name}",
                "levels": ratios(levels, "agenttrain", args.against_name),
            }
    finally:
        server.stop()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
