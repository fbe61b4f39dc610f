"""`agenttrain memory serve`: ReMe's task-memory HTTP API over our pool, so AgentEvolver-style
clients work unchanged. Same paths, request fields (`workspace_id`, `query`, `messages`,
`top_k`, `trajectories: [{messages, score}]`) and response (`answer`, `messages`, `success`,
`metadata`) as ReMe 0.1.10/0.2.x; summaries are made by our summarizer (rules by default),
so no LLM is needed.

A trajectory whose `metadata.split` is not "train" is refused (HTTP 400). ReMe clients do
not send a split (ours does), so a server started for an environment (`--env`) also refuses
any task id outside that environment's training split, labelled or not. Our client also
sends `metadata.first_user` (where the task starts, after the environment's fixed
instructions) and `metadata.goal`, so experiences are filed under the task's goal exactly as
the in-process pool files them.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Collection
from typing import Any

import uvicorn
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, ConfigDict, Field

from agenttrain.memory.experience import (
    TRAIN_SPLIT,
    EpisodeRecord,
    SplitLeak,
    require_train_split,
    retrieval_answer,
    simple_answer,
)
from agenttrain.memory.pool import ExperiencePool
from agenttrain.memory.summarize import Summarizer, record_from_messages
from agenttrain.serving.runner import READY_PREFIX, bind

IDENTITY = "agenttrain experience pool (ReMe task-memory API)"


class TrajectoryIn(BaseModel):
    model_config = ConfigDict(extra="allow")

    task_id: str = ""
    messages: list[dict[str, Any]] = Field(default_factory=list)
    score: float = 0.0
    metadata: dict[str, Any] = Field(default_factory=dict)


class FlowRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    query: str = ""
    messages: list[dict[str, Any]] = Field(default_factory=list)
    workspace_id: str = ""
    metadata: dict[str, Any] = Field(default_factory=dict)
    trajectories: list[TrajectoryIn] = Field(default_factory=list)
    top_k: int = Field(3, ge=1)


class FlowResponse(BaseModel):
    answer: str = ""
    messages: list[dict[str, Any]] = Field(default_factory=list)
    success: bool = True
    metadata: dict[str, Any] = Field(default_factory=dict)


def retrieval_query(request: FlowRequest) -> str:
    """The text to match: `query`, else the last user message. AgentEvolver sends the JSON of
    the whole initial conversation as `query`; its last user message (the task) is used then,
    so the long fixed system prompt does not dominate the match."""
    messages = request.messages
    if request.query:
        try:
            parsed = json.loads(request.query)
        except ValueError:
            return request.query
        if not isinstance(parsed, list):
            return request.query
        messages = [m for m in parsed if isinstance(m, dict)]
    users = [str(m.get("content", "")) for m in messages if m.get("role") == "user"]
    return users[-1] if users else ""


def record_of_request(trajectory: TrajectoryIn, task_id: str, split: str) -> EpisodeRecord:
    """The episode as posted; our client's `first_user` and `goal` say where the task starts."""
    first_user = trajectory.metadata.get("first_user")
    goal = trajectory.metadata.get("goal")
    return record_from_messages(
        trajectory.messages,
        trajectory.score,
        task_id,
        split,
        first_user=int(first_user) if first_user is not None else None,
        goal=str(goal) if goal else None,
    )


def create_memory_app(
    pool: ExperiencePool, summarizer: Summarizer, train_tasks: Collection[str] | None = None
) -> FastAPI:
    """The ReMe task-memory app; `train_tasks`: the only task ids that may enter the pool."""
    app = FastAPI(title="agenttrain memory")
    app.state.pool = pool

    @app.get("/")
    async def root() -> str:
        return IDENTITY

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "healthy"}

    @app.post("/summary_task_memory")
    async def summary(request: FlowRequest) -> FlowResponse:
        workspace = request.workspace_id or "default"
        experiences = []
        for number, trajectory in enumerate(request.trajectories):
            split = str(trajectory.metadata.get("split", TRAIN_SPLIT))
            task_id = trajectory.task_id or f"request-{number}"
            try:
                require_train_split(task_id, split, train_tasks)
            except SplitLeak as leak:
                raise HTTPException(400, str(leak)) from None
            record = record_of_request(trajectory, task_id, split)
            for item in await summarizer.summarize(record):
                item.workspace_id = workspace
                item.run_step = int(trajectory.metadata.get("run_step", 0))
                experiences.append(item)
        inserted = await asyncio.to_thread(pool.add, experiences)
        memories = [item.to_reme() for item in experiences]
        return FlowResponse(
            answer=json.dumps(memories),
            metadata={
                "memory_list": memories,
                "update_result": {"deleted_count": 0, "inserted_count": inserted},
            },
        )

    async def search(request: FlowRequest) -> list:
        workspace = request.workspace_id or "default"
        return await asyncio.to_thread(
            pool.search, retrieval_query(request), request.top_k, workspace
        )

    @app.post("/retrieve_task_memory")
    async def retrieve(request: FlowRequest) -> FlowResponse:
        found = await search(request)
        return FlowResponse(
            answer=retrieval_answer(found),
            metadata={"memory_list": [item.to_reme() for item in found]},
        )

    @app.post("/retrieve_task_memory_simple")
    async def retrieve_simple(request: FlowRequest) -> FlowResponse:
        found = await search(request)
        return FlowResponse(
            answer=simple_answer(found),
            metadata={"memory_list": [item.to_reme() for item in found]},
        )

    return app


def serve_memory(
    pool: ExperiencePool,
    summarizer: Summarizer,
    *,
    host: str = "127.0.0.1",
    port: int = 8001,
    log_level: str = "warning",
    train_tasks: Collection[str] | None = None,
) -> None:
    """Serve until interrupted; prints the ready line launchers read."""
    app = create_memory_app(pool, summarizer, train_tasks)
    sock = bind(host, port)
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    url = f"http://{shown}:{sock.getsockname()[1]}"
    print(f"{READY_PREFIX}{url}", flush=True)
    print(
        f"Serving the experience pool {pool.path} on {url} ({pool.count()} experiences; "
        f"retrieval {pool.retrieval}; summarizer {summarizer.name}). Ctrl-C stops it.",
        file=sys.stderr,
        flush=True,
    )
    config = uvicorn.Config(app, log_level=log_level, timeout_keep_alive=75)
    uvicorn.Server(config).run(sockets=[sock])
