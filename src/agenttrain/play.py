"""Play one episode by hand in the terminal, in-process or against a server."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from agenttrain.envs import Environment, get_spec
from agenttrain.envs.source import EnvSource
from agenttrain.rollout.engine import RolloutConfig

QUIT_WORDS = (":q", ":quit", "quit", "exit")


@contextlib.asynccontextmanager
async def open_environment(
    env_name: str, servers: Sequence[str] = (), token: str | None = None
) -> AsyncIterator[Environment]:
    """An in-process environment, or a session on the given servers; closed on exit."""
    async with EnvSource(env_name, servers=servers, token=token) as source:
        env = source.environment()
        try:
            yield env
        finally:
            await env.close()


async def play(
    env_name: str,
    task_id: int,
    *,
    servers: Sequence[str] = (),
    token: str | None = None,
    max_turns: int | None = None,
    console: Console | None = None,
    read_action: Callable[[str], str] | None = None,
) -> float:
    """Let a person play `task_id`; returns the final reward."""
    console = console or Console()
    read = read_action or console.input
    spec = get_spec(env_name)
    limit = RolloutConfig(max_turns=max_turns).turn_limit(spec)
    async with open_environment(env_name, servers, token) as env:
        first = await env.reset(task_id)
        where = servers[0] if servers else "in-process"
        console.print(
            f"[bold]{spec.display_name}[/] task {task_id} ({where}); up to {limit} turns. "
            f"Type an action, or {QUIT_WORDS[0]} to stop."
        )
        details = ", ".join(f"{k}: {v}" for k, v in first.info.items() if k != "task_id")
        console.print(Panel(Text(first.text), title="observation", subtitle=details or None))
        if servers:
            # The wire format carries no inventory (it is AgentGym's, exactly); ask the env.
            console.print(
                "[dim]Over a server the inventory is not shown after each step; "
                "the environment's own actions (e.g. `inventory`) work.[/]"
            )
        reward, done, turn = 0.0, False, 0
        while turn < limit and not done:
            try:
                action = (
                    await asyncio.to_thread(read, f"[bold cyan]action {turn + 1}>[/] ")
                ).strip()
            except (EOFError, KeyboardInterrupt):
                break
            if action in QUIT_WORDS:
                break
            if not action:
                continue
            turn += 1
            result = await env.step(action)
            reward, done = result.reward, result.done
            style = "green" if result.reward > 0 else "white"
            console.print(Text(result.observation, style=style))
            inventory = result.info.get("inventory")
            if isinstance(inventory, dict):
                console.print(_inventory_table(inventory))
        verdict = "[bold green]solved[/]" if done and reward > 0 else "[bold red]not solved[/]"
        console.print(f"Episode over: {verdict}, reward {reward:g} after {turn} turns.")
        return reward


def _inventory_table(inventory: dict[str, int]) -> Table | str:
    if not inventory:
        return "[dim]inventory: empty[/]"
    table = Table(title="inventory", show_header=False, box=None, padding=(0, 1))
    for item, count in inventory.items():
        table.add_row(str(count), Text(item))
    return table
