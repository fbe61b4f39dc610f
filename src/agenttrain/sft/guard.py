"""The test-split guard: demonstrations, SFT data and the experience pool never see test tasks.

A conversation is a leak when it names a test task (our formats carry env and task id), or
when a user message of its opening (before the first trained turn) is a test task's first
observation (exact text; for environments whose observation names a goal, as TextCraft's
does, the same goal — AgentGym's data shows other command lists for the same goal, and its
ids map to other goals).
"""

from __future__ import annotations

import asyncio
from functools import cached_property

from agenttrain.envs import get_spec, make_env
from agenttrain.envs.registry import registration
from agenttrain.sft.data import Conversation

PROTECTED_SPLIT = "test"


class HeldOutLeak(ValueError):
    """Test-split tasks would reach training data."""


class HeldOutGuard:
    def __init__(self, env: str) -> None:
        self.env = env
        self.spec = get_spec(env)
        self.test_ids = frozenset(self.spec.splits().get(PROTECTED_SPLIT, ()))

    def refuse_split(self, split: str, purpose: str) -> None:
        if split == PROTECTED_SPLIT:
            raise HeldOutLeak(
                f"{purpose} may not use the {PROTECTED_SPLIT} split of {self.env}: it is held out "
                "for evaluation; use train (or val)"
            )

    def refuse_tasks(self, task_ids: list[int], purpose: str) -> None:
        leaked = sorted(set(task_ids) & self.test_ids)
        if leaked:
            raise HeldOutLeak(
                f"{purpose} may not use {self.env} test tasks {leaked[:10]}"
                f"{' …' if len(leaked) > 10 else ''}"
            )

    def _identity(self, observation: str) -> str:
        described = self.spec.describe(observation) if self.spec.describe else {}
        if "goal" in described:
            return f"goal:{described['goal']}"
        return "text:" + " ".join(observation.split())

    @cached_property
    def test_identities(self) -> frozenset[str]:
        """Identities of the test tasks' first observations (in-process environments only)."""
        if not self.test_ids or not registration(self.env).in_process:
            return frozenset()

        async def first_observations() -> list[str]:
            texts = []
            for task_id in sorted(self.test_ids):
                env = make_env(self.env)
                texts.append((await env.reset(task_id)).text)
                await env.close()
            return texts

        return frozenset(self._identity(text) for text in asyncio.run(first_observations()))

    def check(self, conversation: Conversation) -> None:
        if conversation.env not in (None, self.env):
            return
        if conversation.task_id is not None and conversation.task_id in self.test_ids:
            raise HeldOutLeak(
                f"{conversation.source}: {self.env} task {conversation.task_id} is in the "
                f"{PROTECTED_SPLIT} split; training data may not contain held-out tasks"
            )
        if not self.test_identities:
            return
        for text in conversation.opening:
            if self._identity(text) in self.test_identities:
                raise HeldOutLeak(
                    f"{conversation.source}: it shows a {self.env} {PROTECTED_SPLIT} task's "
                    f"first observation ({self._identity(text)[:60]}); training data may not "
                    "contain held-out tasks"
                )
