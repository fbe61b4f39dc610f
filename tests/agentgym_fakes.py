"""Stand-ins for AgentGym servers that cannot run on this machine (their data is not
installable) or whose task order depends on the install (TextCraft), faithful to the
documented wire protocol (agentgym.md section 1): routes, field names, answer shapes, id
styles and missing `/close` routes included. Each records what it received so tests can
check what the client sent.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Collection
from typing import Any

from fastapi import FastAPI, Request
from pydantic import BaseModel

from agenttrain.envs.textcraft.game import TextCraftGame
from agenttrain.envs.textcraft.recipes import default_book
from agenttrain.envs.textcraft.tasks import num_tasks, task


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


def shuffled_textcraft_goals(seed: int, left_out: Collection[int] = ()) -> list[int]:
    """Our TextCraft task ids in a seeded order: what another AgentGym install numbers 0, 1, ..."""
    order = [task_id for task_id in range(num_tasks()) if task_id not in set(left_out)]
    random.Random(seed).shuffle(order)
    return order


class _CreateBody(BaseModel):
    commands: str | None = None
    goal: str | None = None


class _ResetBody(BaseModel):
    id: int
    data_idx: int = 0


class _StepBody(BaseModel):
    id: int
    action: str


class _CloseBody(BaseModel):
    id: int


def fake_agentgym_textcraft(goals: list[int]) -> FastAPI:
    """A fake of AgentGym's TextCraft server (agentgym.md section 1.1; the routes the client
    uses) whose `data_idx` i shows our task `goals[i % len(goals)]`, as an install whose recipe
    files list in another order.

    No `/health`; `/create` needs a JSON body and resets to `data_idx` = the new id; errors are
    HTTP 200 `{"error": ...}`; `/close` answers true, then false. Replace `app.state.goals` to
    act out another install answering at the same URL. `app.state.resets` counts data_idx resets.
    """
    app = FastAPI()
    app.state.goals = goals
    app.state.resets = 0
    games: dict[int, TextCraftGame] = {}
    next_id = iter(range(1_000_000))

    def start(session: int, data_idx: int) -> dict[str, Any]:
        chosen = task(app.state.goals[data_idx % len(app.state.goals)])
        games[session] = TextCraftGame(default_book(), chosen.goal)
        app.state.resets += 1
        return {"id": session, "observation": chosen.observation, "done": False, "reward": 0}

    def unknown(session: int) -> dict[str, str] | None:
        return None if session in games else {"error": f"The id {session} is not valid."}

    @app.get("/")
    def hello() -> str:
        return "This is environment TextCraft."

    @app.post("/create")
    def create(body: _CreateBody) -> Any:
        session = next(next_id)
        return start(session, session)

    @app.post("/reset")
    def reset(body: _ResetBody) -> Any:
        return unknown(body.id) or start(body.id, body.data_idx)

    @app.post("/step")
    def step(body: _StepBody) -> Any:
        if error := unknown(body.id):
            return error
        outcome = games[body.id].step(body.action)
        return {"observation": outcome.observation, "reward": outcome.reward, "done": outcome.done}

    @app.post("/close")
    def close(body: _CloseBody) -> bool:
        return games.pop(body.id, None) is not None

    return app
