"""`agenttrain selfplay`: the whole environment stack end to end on this machine.

Starts a TextCraft server (a real uvicorn process on loopback), then the oracle plays the
test split through the HTTP client, many episodes at once, and the results are summarised.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from agenttrain.envs import get_spec
from agenttrain.envs.source import EnvSource
from agenttrain.envs.textcraft.oracle import OracleEpisode, play_episode
from agenttrain.serving.launch import running_servers


async def oracle_selfplay(
    urls: Sequence[str], task_ids: Sequence[int], concurrency: int, progress: Progress
) -> list[OracleEpisode]:
    """Play every task with the oracle over the servers, `concurrency` episodes at a time."""
    bar = progress.add_task("oracle episodes", total=len(task_ids))
    slots = asyncio.Semaphore(concurrency)
    async with EnvSource("textcraft", servers=urls) as source:

        async def one(task_id: int) -> OracleEpisode:
            async with slots, source.environment() as env:
                episode = await play_episode(env, task_id)
            progress.advance(bar)
            return episode

        return list(await asyncio.gather(*(one(t) for t in task_ids)))


def run_demo(split: str = "test", concurrency: int = 16, console: Console | None = None) -> int:
    """Run the demo; returns a process exit code (0 when every task was solved)."""
    console = console or Console()
    task_ids = get_spec("textcraft").split(split)
    console.print(f"[bold]agenttrain selfplay[/]: TextCraft {split} split ({len(task_ids)} tasks)")
    with running_servers("textcraft") as urls:
        console.print(f"started an AgentGym-compatible TextCraft server at {urls[0]}")
        started = time.perf_counter()
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
        with Progress(*columns, TimeElapsedColumn(), console=console) as progress:
            episodes = asyncio.run(oracle_selfplay(urls, task_ids, concurrency, progress))
        elapsed = time.perf_counter() - started
    solved = sum(1 for e in episodes if e.done and e.reward == 1)
    steps = sum(e.turns for e in episodes)
    table = Table(title="oracle through the HTTP server")
    for column in ("episodes", "solved", "mean turns", "env steps", "wall time", "steps/s"):
        table.add_column(column, justify="right")
    table.add_row(
        str(len(episodes)),
        f"{solved} ({solved / len(episodes):.0%})",
        f"{steps / len(episodes):.1f}",
        str(steps),
        f"{elapsed:.2f} s",
        f"{steps / elapsed:.0f}",
    )
    console.print(table)
    console.print(
        "Next: play a task yourself with [bold]agenttrain play textcraft --task 12[/], "
        "or serve it for AgentGym clients with [bold]agenttrain serve textcraft[/]."
    )
    return 0 if solved == len(episodes) else 1
