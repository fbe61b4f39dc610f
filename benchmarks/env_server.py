"""Throughput, latency, server CPU per request and memory per live session of
AgentGym-compatible environment servers (`--env textcraft`, the default, `babyai` or
`sciworld`, served with 4 worker processes; memory counts the server and all its descendants).

Each simulated client loops create -> reset -> 5 steps -> close (the loop AgentGym-RL runs
per episode) for a fixed time. Reported per server and concurrency level: steps/s (only
/step calls count), requests/s, p50/p99 /step latency, and the server's CPU time per
request from /proc/<pid>/stat (utime + stime of all its threads) with its RSS.

Steps/s depends on the load client as much as on the server (both share this machine's
cores); CPU per request does not. So `--against URL` drives a second server, e.g.
AgentGym's own, with the SAME client in the SAME run, level by level, and the comparison
is made on both figures. Its pid comes from `--against-pid`, or from the process that
listens on the URL's loopback port; when neither works only client-side figures are given.

TextCraft's actions are the oracle's first moves for the goal the server names in its first
observation (padded with `inventory`), so both servers get valid moves for their own goal
even where their task ids name different goals. BabyAI's are turns and steps forward and
then a high-level action from the first observation's action list.

Memory: `--live-sessions N` opens N sessions at once (each reset to a task) and reports the
server's RSS growth per live session.

Usage: python benchmarks/env_server.py [--env textcraft|babyai|sciworld] [--levels 1 8 32 128]
           [--seconds 10] [--live-sessions 1024] [--out FILE]
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from agenttrain.envs import get_spec
from agenttrain.envs.textcraft.oracle import goal_from_observation, plan
from agenttrain.envs.textcraft.tasks import num_tasks, task
from agenttrain.serving.client import EnvServerPool
from agenttrain.serving.errors import EnvServerError
from agenttrain.serving.launch import start_server

STEPS_PER_EPISODE = 5
CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}


@dataclass
class Target:
    """One server under load; `pid` is None when its CPU time cannot be read."""

    name: str
    url: str
    pid: int | None
    pid_source: str


@dataclass(frozen=True)
class Workload:
    """What the clients play on one environment: which tasks, and which actions after a
    given first observation."""

    env: str
    task_ids: Sequence[int]
    actions: Callable[[str], list[str]]


def textcraft_workload() -> Workload:
    """Five valid-looking actions per goal: the oracle's first moves, padded with `inventory`."""
    table = {}
    for task_id in range(num_tasks()):
        goal = task(task_id).goal
        moves = [p.action for p in plan(goal)][:STEPS_PER_EPISODE]
        table[goal] = moves + ["inventory"] * (STEPS_PER_EPISODE - len(moves))
    return Workload(
        "textcraft", range(num_tasks()), lambda first: table[goal_from_observation(first)]
    )


def babyai_actions(first: str) -> list[str]:
    """Turns and steps, then the first high-level action the first observation offers."""
    listed = first.rsplit("Available actions: [", 1)[1].rstrip("]").split(", ")
    high_level = [a.strip('"') for a in listed if a.startswith(('"go to', '"pickup', '"toggle'))]
    return ["turn left", "move forward", "turn right", "move forward", *high_level[:1]][
        :STEPS_PER_EPISODE
    ]


def sciworld_workload() -> Workload:
    """The test games; looking around and checking the inventory (valid in every game)."""
    from agenttrain.envs import get_spec

    actions = ["look around", "inventory"] * STEPS_PER_EPISODE
    return Workload(
        "sciworld", get_spec("sciworld").split("test"), lambda first: actions[:STEPS_PER_EPISODE]
    )


WORKLOADS: dict[str, Callable[[], Workload]] = {
    "textcraft": textcraft_workload,
    "babyai": lambda: Workload("babyai", range(900), babyai_actions),
    "sciworld": sciworld_workload,
}
SERVER_ARGS: dict[str, list[str]] = {"sciworld": ["--workers", "4"]}
"""Extra `agenttrain serve` flags per environment (SciWorld: 4 worker processes)."""


async def client(pool: EnvServerPool, worker: int, deadline: float, stats: dict) -> None:
    workload: Workload = stats["workload"]
    success = get_spec(workload.env).success_reward
    episode = 0
    while time.perf_counter() < deadline:
        task_id = workload.task_ids[(worker * 7919 + episode) % len(workload.task_ids)]
        episode += 1
        steps = 0
        try:
            async with pool.environment() as env:
                first = await env.reset(task_id)
                for action in workload.actions(first.text):
                    started = time.perf_counter()
                    result = await env.step(action)
                    stats["latency"].append(time.perf_counter() - started)
                    steps += 1
                    if result.done:  # BabyAI refuses steps after the end, as AgentGym's does
                        break
            stats["solved"] += result.done and result.reward >= success
        except EnvServerError:  # counted, not hidden: a server that errs does less work
            stats["failed_episodes"] += 1
            continue
        stats["requests"] += 3 + steps  # create, reset, the steps, close
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


async def load(target: Target, clients: int, seconds: float, workload: Workload) -> dict:
    """Drive one server; usage is read after the pool's identity check, around the load only."""
    stats = {
        "latency": [],
        "requests": 0,
        "episodes": 0,
        "solved": 0,
        "failed_episodes": 0,
        "workload": workload,
    }
    async with EnvServerPool(workload.env, target.url) as pool:
        await pool.verify()  # AgentGym's server: its task table is read or spot-checked here
        stats["before"] = Usage.now(target.pid)
        deadline = time.perf_counter() + seconds
        await asyncio.gather(*(client(pool, w, deadline, stats) for w in range(clients)))
        stats["after"] = Usage.now(target.pid)
    return stats


def run_level(target: Target, clients: int, seconds: float, workload: Workload) -> dict:
    """One load run against one server, with the server's and the client's CPU time."""
    load_before = os.getloadavg()[0]
    stats = asyncio.run(load(target, clients, seconds, workload))
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
    """Resident memory of a process and all its descendants (SciWorld's worker processes and
    their JVMs count too)."""
    if pid is None:
        return None
    total_kib = 0
    for member in [pid, *descendants(pid)]:
        try:
            status = Path(f"/proc/{member}/status").read_text()
        except OSError:  # exited meanwhile
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total_kib += int(line.split()[1])
    return round(total_kib / 1024, 1)


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, from the parent field of /proc/*/stat."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        parent = int(text[text.rindex(")") + 2 :].split()[1])
        children.setdefault(parent, []).append(int(stat.parent.name))
    found, frontier = [], [pid]
    while frontier:
        below = children.get(frontier.pop(), [])
        found += below
        frontier += below
    return found


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


async def hold_sessions(target: Target, workload: Workload, sessions: int) -> dict:
    """RSS growth of the server while `sessions` sessions are open and reset at once."""
    async with EnvServerPool(workload.env, target.url) as pool:
        await pool.verify()
        before = rss_mib(target.pid)
        envs = [pool.environment() for _ in range(sessions)]
        ids = workload.task_ids
        for start in range(0, sessions, 64):  # reset in batches: a cap-sized burst is not the point
            batch = range(start, min(start + 64, sessions))
            await asyncio.gather(*(envs[i].reset(ids[i % len(ids)]) for i in batch))
        held = rss_mib(target.pid)
        await asyncio.gather(*(env.close() for env in envs))
    after = rss_mib(target.pid)
    if before is None or held is None:
        return {"server": target.name, "live_sessions": sessions, "rss_mib": None}
    return {
        "server": target.name,
        "live_sessions": sessions,
        "rss_mib_before": before,
        "rss_mib_holding": held,
        "rss_mib_after_close": after,
        "rss_kib_per_live_session": round((held - before) * 1024 / sessions, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", choices=sorted(WORKLOADS), default="textcraft")
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 8, 32, 128])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--live-sessions", type=int, default=1024, help="0 skips the memory run")
    parser.add_argument("--against", help="URL of another AgentGym-compatible server")
    parser.add_argument("--against-pid", type=int, help="pid of that server (for its CPU time)")
    parser.add_argument("--against-name", default="against", help="label of that server")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    name = "env_server" if args.env == "textcraft" else f"env_server_{args.env}"
    out = args.out or Path(__file__).parent / "results" / f"{name}.json"

    workload = WORKLOADS[args.env]()
    server = start_server(
        args.env, extra_args=["--max-sessions", "4096", *SERVER_ARGS.get(args.env, [])]
    )
    try:
        targets = [Target("agenttrain", server.url, server.process.pid, "started here")]
        if args.against:
            targets.append(against_target(args.against, args.against_pid, args.against_name))
        for target in targets:
            if target.pid is None:
                print(f"{target.name}: server pid {target.pid_source}; client-side figures only")
            asyncio.run(hold_sessions(target, workload, 8))  # warm-up: imports, first levels
        memory = []  # measured first: the load below leaves freed memory the sessions would reuse
        for target in targets if args.live_sessions else []:
            memory.append(asyncio.run(hold_sessions(target, workload, args.live_sessions)))
            print(json.dumps(memory[-1]))
        for target in targets:
            asyncio.run(load(target, 4, 1.0, workload))  # warm-up
        rss_before = {t.name: rss_mib(t.pid) for t in targets}
        levels = []
        for clients in args.levels:
            for target in targets:
                result = run_level(target, clients, args.seconds, workload)
                levels.append(result)
                print(json.dumps(result))
        report = {
            "benchmark": "env_server",
            "env": args.env,
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
            "memory": memory,
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
