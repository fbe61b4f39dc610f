"""Where a run's experiences live: the in-process pool (default) or a ReMe-compatible server
(`memory.url`: ours, `agenttrain memory serve`, or a real ReMe). Both take finished
trajectories and answer a retrieval query with one text, as AgentEvolver's client does."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import aiohttp

from agenttrain.memory.config import MemoryConfig
from agenttrain.memory.embedding import load_embedder
from agenttrain.memory.experience import TRAIN_SPLIT, retrieval_answer
from agenttrain.memory.pool import ExperiencePool
from agenttrain.memory.summarize import Summarizer, build_summarizer, record_of
from agenttrain.rollout.trajectory import Trajectory


class MemoryServiceError(RuntimeError):
    """The memory server failed or refused; never turned into an empty answer silently."""


class ExperienceService(Protocol):
    async def summarize(
        self, trajectories: Sequence[Trajectory], first_user: int, run_step: int
    ) -> int:
        """Add what the (training-split) trajectories teach; returns experiences inserted."""
        ...

    async def retrieve(self, query: str, top_k: int) -> str:
        """The experience text for a task goal ("" when there is none)."""
        ...

    def size(self) -> int | None: ...

    async def aclose(self) -> None: ...


class LocalMemory:
    """The pool in this process, filled by a summarizer."""

    def __init__(
        self, pool: ExperiencePool, summarizer: Summarizer, workspace_id: str = "default"
    ) -> None:
        self.pool = pool
        self.summarizer = summarizer
        self.workspace_id = workspace_id

    async def summarize(
        self, trajectories: Sequence[Trajectory], first_user: int, run_step: int
    ) -> int:
        experiences = []
        for trajectory in trajectories:
            record = record_of(trajectory, TRAIN_SPLIT, first_user)
            for item in await self.summarizer.summarize(record):
                item.run_step = run_step
                item.workspace_id = self.workspace_id
                experiences.append(item)
        return self.pool.add(experiences)

    async def retrieve(self, query: str, top_k: int) -> str:
        return retrieval_answer(self.pool.search(query, top_k, self.workspace_id))

    def size(self) -> int | None:
        return self.pool.count(self.workspace_id)

    async def aclose(self) -> None:
        backend = getattr(self.summarizer, "backend", None)
        if backend is not None:
            await backend.aclose()


class ReMeClient:
    """A client of ReMe's task-memory HTTP API (`/summary_task_memory`,
    `/retrieve_task_memory`, `/health`), with the request fields AgentEvolver sends."""

    def __init__(
        self,
        url: str,
        workspace_id: str = "default",
        *,
        retrieve_endpoint: str = "retrieve_task_memory",
        timeout_s: float = 300.0,
    ) -> None:
        self.url = url.rstrip("/")
        self.workspace_id = workspace_id
        self.retrieve_endpoint = retrieve_endpoint
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    async def health(self) -> bool:
        async with self._http().get(f"{self.url}/health") as response:
            return response.status == 200 and (await response.json()).get("status") == "healthy"

    async def check(self) -> None:
        """Fail before training when the server is down or not a task-memory server (it was
        found only after the first step's rollouts)."""
        try:
            healthy = await self.health()
        except (aiohttp.ClientError, TimeoutError, ValueError) as failure:
            await self.aclose()  # the run ends here: no session left open ("Unclosed client")
            reason = f"{type(failure).__name__}: {failure}"
            raise MemoryServiceError(
                f"memory.url {self.url} cannot be reached ({reason}); start one with "
                "`agenttrain memory serve` or unset memory.url to keep the pool in the run folder"
            ) from None
        if not healthy:
            await self.aclose()
            raise MemoryServiceError(
                f"memory.url {self.url} does not answer /health as a task-memory server"
            )

    async def summarize(
        self, trajectories: Sequence[Trajectory], first_user: int, run_step: int
    ) -> int:
        body = {
            "workspace_id": self.workspace_id,
            "trajectories": [
                {
                    "task_id": str(t.task_id),
                    "messages": t.messages,
                    "score": float(t.reward or 0.0),
                    "metadata": {
                        "split": TRAIN_SPLIT,
                        "run_step": run_step,
                        "first_user": first_user,  # what comes before is the fixed start
                        **({"goal": str(t.task_info["goal"])} if t.task_info.get("goal") else {}),
                    },
                }
                for t in trajectories
            ],
        }
        answer = await self._post("summary_task_memory", body)
        metadata = answer.get("metadata") or {}
        update = metadata.get("update_result") or {}
        return int(update.get("inserted_count", len(metadata.get("memory_list") or [])))

    async def retrieve(self, query: str, top_k: int) -> str:
        body = {"workspace_id": self.workspace_id, "query": query, "top_k": top_k}
        return str((await self._post(self.retrieve_endpoint, body)).get("answer") or "")

    def size(self) -> int | None:
        return None  # ReMe's API does not report it

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self.timeout)
        return self._session

    async def _post(self, endpoint: str, body: dict[str, Any]) -> dict[str, Any]:
        url = f"{self.url}/{endpoint}"
        try:
            async with self._http().post(url, json=body) as response:
                text = await response.text()
                if response.status != 200:
                    raise MemoryServiceError(f"{url}: HTTP {response.status}: {text[:300]}")
        except aiohttp.ClientError as failure:
            raise MemoryServiceError(f"{url}: {type(failure).__name__}: {failure}") from None
        answer = json.loads(text) if text else {}
        if not answer.get("success", True):
            raise MemoryServiceError(f"{url}: the server reports failure: {text[:300]}")
        return answer


POOL_FILE = Path("memory") / "pool.sqlite"


def open_service(config: MemoryConfig, run_dir: Path) -> ExperienceService:
    """A run's memory: the ReMe-compatible server at `memory.url`, else the pool file in the
    run folder (opened again, with what it holds, when the run resumes)."""
    if config.url is not None:
        return ReMeClient(config.url, config.workspace_id)
    pool = ExperiencePool(run_dir / POOL_FILE, load_embedder(config.retrieval))
    summarizer = build_summarizer(config.summarizer, config.summarizer_base_url)
    return LocalMemory(pool, summarizer, config.workspace_id)
