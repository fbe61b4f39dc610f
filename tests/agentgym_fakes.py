"""Stand-ins for AgentGym servers that cannot run on this machine (their data is not
installable), faithful to the documented wire protocol (agentgym.md sections 1.2-1.7):
routes, field names, answer shapes, id styles and missing `/close` routes included.
Each records the request bodies it received so tests can check what the client sent.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from fastapi import FastAPI, Request


def fake_agentgym_server(kind: str) -> FastAPI:
    """A fake of AgentGym's `kind` server: webshop, searchqa, alfworld or sciworld."""
    app = FastAPI()
    app.state.received = []
    rng = random.Random(7)
    counter = iter(range(1_000_000))

    async def record(request: Request) -> dict[str, Any]:
        body = await request.json() if await request.body() else None
        app.state.received.append((request.url.path, body))
        return body or {}

    root = {
        "webshop": "ok",
        "searchqa": "ok",
        "alfworld": "This is environment AlfWorld.",
        "sciworld": "This is environment ScienceWorld.",
    }[kind]

    @app.get("/")
    def hello() -> str:
        return root

    @app.post("/create")
    async def create(request: Request) -> Any:
        await record(request)
        if kind == "webshop":
            return rng.randint(0, 48950076)  # WebShop: a random bare int
        if kind == "searchqa":
            return next(counter)  # SearchQA: a counter, bare int
        return {"id": next(counter)}

    @app.post("/reset")
    async def reset(request: Request) -> Any:
        body = await record(request)
        if kind == "webshop":
            return [
                f"WebShop [SEP] Instruction: [SEP] goal {body['session_id']} [SEP] Search",
                None,
            ]
        if kind == "searchqa":
            return f"Question {body['id']}?"
        if kind == "alfworld":
            return {
                "id": body["id"],
                "observation": f"You are in room {body['game']}.",
                "available_actions": ["go to desk 1", "look"],
                "task_type": "pick",
            }
        return {
            "task_name": "boil",
            "var_num": body["data_idx"],
            "task_description": "Your task is to boil water.",
            "observation": "This room is called the kitchen.",
            "reward": 0,
            "score": 0,
            "deleted": False,
            "done": False,
        }

    @app.post("/step")
    async def step(request: Request) -> Any:
        body = await record(request)
        if body.get("action") == "hang":
            await asyncio.sleep(1)
        if kind == "webshop":
            return {"state": f"clicked {body['action']}", "reward": 0.5, "done": True, "info": None}
        if kind == "searchqa":
            return {
                "observation": "<information>Doc 1</information>",
                "reward": 0,
                "done": False,
                "info": None,
            }
        if kind == "alfworld":
            return {
                "observation": "Nothing happened.",
                "reward": 0.0,
                "available_actions": [],
                "done": False,
            }
        return {"observation": "The water boils.", "reward": 100, "score": 100, "done": True}

    if kind in ("searchqa", "sciworld"):  # WebShop and ALFWorld have no /close

        @app.post("/close")
        async def close(request: Request) -> Any:
            await record(request)
            return True

    return app
