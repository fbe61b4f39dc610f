"""A training run's experience pool: retrieval for rollouts, and the step's episodes into it.

Wraps an `ExperienceService` (the run folder's pool or a ReMe-compatible server) with what a
training run adds: the seed episodes of `memory.seed_from`, the split guard (never a test
task's experience), per-environment message offsets, and the `memory/*` metrics.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from statistics import fmean

from rich.console import Console

from agenttrain.agent.conversation import conversation_start
from agenttrain.agent.formats import get_format
from agenttrain.memory.config import MemoryConfig
from agenttrain.memory.experience import require_train_split
from agenttrain.memory.service import LocalMemory, ReMeClient, open_service
from agenttrain.rl.environments import RunEnvironment
from agenttrain.rollout.engine import RolloutConfig
from agenttrain.rollout.trajectory import Trajectory, read_jsonl


class RunMemory:
    """The pool of one run, driven on the run's event loop."""

    def __init__(
        self,
        config: MemoryConfig,
        run_dir: Path,
        parts: list[RunEnvironment],
        rollout: RolloutConfig,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.config = config
        self.parts = parts
        self.first_users = {
            part.name: first_user(part, rollout.action_format, rollout.prompt_style)
            for part in parts
        }
        """Per environment, the index of an episode's first observation in its messages
        (after the fixed start): where the summarizer begins reading."""
        self.loop = loop
        self.service = open_service(config, run_dir)
        if isinstance(self.service, ReMeClient):
            loop.run_until_complete(self.service.check())

    async def retrieve(self, goal: str) -> str:
        """The experience text injected into a guided rollout of `goal`."""
        return await self.service.retrieve(goal, self.config.top_k)

    def seed(self, console: Console) -> None:
        """Summarize `memory.seed_from`'s episodes into a pool that is still empty (a run
        restarted before its first checkpoint does not add them twice); they count as step 0."""
        files = self.config.seed_from
        if not files or self.service.size():
            return
        episodes = []
        for file in files:
            if not file.is_file():
                raise FileNotFoundError(f"memory.seed_from: {file} does not exist")
            episodes += [t for t in read_jsonl(file) if not t.errored]
        inserted = self.summarize(episodes, 0)
        names = ", ".join(part.name for part in self.parts)
        if not inserted:
            raise ValueError(
                f"memory.seed_from: {', '.join(map(str, files))} gave no experience for {names} "
                f"({len(episodes)} episodes read, none of these environments')"
            )
        console.print(f"experience pool: {inserted} experiences from {len(episodes)} episodes")

    def remember(self, step: int, trajectories: list[Trajectory]) -> dict[str, float]:
        """Summarize the step's finished training episodes into the pool (every
        `memory.update_freq` steps); `memory/*` metrics, guided vs plain success included."""
        usable = [t for t in trajectories if not t.errored]
        guided = [t for t in usable if t.experience is not None]
        plain = [t for t in usable if t.experience is None]
        metrics: dict[str, float] = {"memory/guided_episodes": len(guided)}
        if guided:
            metrics["memory/guided_success_rate"] = fmean(t.success for t in guided)
        if plain:
            metrics["memory/plain_success_rate"] = fmean(t.success for t in plain)
        frequency = self.config.update_freq
        if frequency and step % frequency == 0:
            metrics["memory/inserted"] = self.summarize(usable, step)
        size = self.service.size()
        if size is not None:
            metrics["memory/pool_size"] = size
        return metrics

    def summarize(self, episodes: list[Trajectory], step: int) -> int:
        """Each environment's episodes into the pool, tagged `step`, after the split guard;
        returns how many experiences were added."""
        inserted = 0
        for part in self.parts:
            mine = [t for t in episodes if t.env == part.name]
            train_ids = {str(task) for task in part.spec.split("train")}
            for trajectory in mine:
                require_train_split(str(trajectory.task_id), part.config.split, train_ids)
            first_user = self.first_users[part.name]
            inserted += self.loop.run_until_complete(self.service.summarize(mine, first_user, step))
        return inserted

    def drop_after(self, step: int) -> None:
        """On resume: the steps after the checkpoint are played again and write their
        experiences again, so a local pool forgets what they wrote."""
        if isinstance(self.service, LocalMemory):
            self.service.pool.drop_after(step)

    def close(self) -> None:
        self.loop.run_until_complete(self.service.aclose())


def first_user(part: RunEnvironment, action_format: str, prompt_style: str) -> int:
    """Index of an episode's first observation in its messages (after the fixed start)."""
    fmt = get_format(part.config.action_format or action_format, part.spec.name)
    return len(conversation_start(part.spec, fmt, prompt_style))
