"""`agenttrain memory serve`: ReMe's task-memory HTTP API over our pool, so AgentEvolver-style
clients work unchanged. Same paths, request fields (`workspace_id`, `query`, `messages`,
`top_k`, `trajectories: [{messages, score}]`) and response (`answer`, `messages`, `success`,
`metadata`) as ReMe 0.1.10/0.2.x; summaries are made by our summarizer (rules by default),
so no LLM is needed.

A trajectory whose `metadata.split` is not "train" is refused (HTTP 400): ReMe clients do
not send a split, ours always does.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import uvicorn
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, ConfigDict, Field

from agenttrain.memory.experience import (
    TRAIN_SPLIT,
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


def create_memory_app(pool: ExperiencePool, summarizer: Summarizer) -> FastAPI:
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
                require_train_split(task_id, split)
            except SplitLeak as leak:
                raise HTTPException(400, str(leak)) from None
            record = record_from_messages(trajectory.messages, trajectory.score, task_id, split)
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
) -> None:
    """Serve until interrupted; prints the ready line launchers read."""
    app = create_memory_app(pool, summarizer)
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
