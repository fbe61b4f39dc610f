"""Test fixtures: fakes of AgentGym's servers that cannot run on this machine (their data is
not installable) or whose task order depends on the install (TextCraft).

Each is built from the documented wire protocol (agentgym.md section 1): routes, field names,
answer shapes, id styles, missing `/close` routes, and the defects the client works around
(WebShop's and SQLGym's recycled ids, ALFWorld's one-at-a-time handlers, SciWorld's 500 on a
second close). Task sets are small and invented, numbered by ids from AgentGym's published
splits so `--split test` reaches them. Each records what it received for the tests to check.
The `*_player` functions play a fake's tasks from the conversation (they know its answers),
served as an OpenAI-compatible chat model by `scripted_chat_endpoint`.
"""

from __future__ import annotations

import asyncio
import random
import re
import sqlite3
import string
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from pydantic import BaseModel

from agenttrain.envs.textcraft.game import TextCraftGame
from agenttrain.envs.textcraft.recipes import default_book
from agenttrain.envs.textcraft.tasks import num_tasks, task

Messages = Sequence[dict[str, str]]
T = TypeVar("T")


async def _recorded(app: FastAPI, request: Request) -> dict[str, Any]:
    """The request's JSON body (or {}), noted in `app.state.received` with its path."""
    body = await request.json() if await request.body() else None
    app.state.received.append((request.url.path, body))
    return body or {}


def _recycling_create(app: FastAPI, capacity: int, id_range: int) -> Callable[[], int]:
    """AgentGym's WebShop/SQLGym `/create`: a random id until `capacity` exist, then the
    existing ids handed out again round-robin."""
    rng = random.Random(11)
    app.state.ids, turn = [], [-1]

    def create() -> int:
        if len(app.state.ids) == capacity:
            turn[0] = (turn[0] + 1) % capacity
            return app.state.ids[turn[0]]
        app.state.ids.append(rng.randint(0, id_range))
        return app.state.ids[-1]

    return create


# --- WebShop (agentgym.md 1.5) ------------------------------------------------------------


@dataclass(frozen=True)
class Product:
    asin: str
    title: str
    price: float
    options: dict[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class ShopGoal:
    instruction: str
    asin: str
    options: dict[str, str]
    max_price: float
    keywords: str


PRODUCTS = (
    Product("B07TEA0001", "Organic green tea, 100 bags", 12.5, {"size": ("50 bags", "100 bags")}),
    Product("B07MUG0002", "Ceramic coffee mug, blue", 9.0, {"color": ("blue", "white")}),
    Product("B07TEA0003", "Black tea tin", 15.0),
)
WEBSHOP_GOALS = {  # session ids: the first two of AgentGym's test split, one of its train split
    5238: ShopGoal(
        "i want organic green tea with 100 bags, and price lower than 20.00 dollars",
        "B07TEA0001",
        {"size": "100 bags"},
        20.0,
        "organic green tea",
    ),
    912: ShopGoal(
        "i need a white ceramic coffee mug, and price lower than 10.00 dollars",
        "B07MUG0002",
        {"color": "white"},
        10.0,
        "ceramic coffee mug",
    ),
    6: ShopGoal("i want a black tea tin", "B07TEA0003", {}, 30.0, "black tea"),
}


@dataclass
class ShopSession:
    goal: ShopGoal
    page: str = "search"
    results: tuple[Product, ...] = ()
    product: Product | None = None
    chosen: dict[str, str] = field(default_factory=dict)


def _shop_observation(session: ShopSession, reward: float = 0.0) -> str:
    instruction = f"Instruction: [SEP] {session.goal.instruction}"
    if session.page == "search":
        return f"WebShop [SEP] {instruction} [SEP] Search"
    if session.page == "results":
        listed = " [SEP] ".join(
            f"{p.asin} [SEP] {p.title} [SEP] ${p.price}" for p in session.results
        )
        head = f"Page 1 (Total results: {len(session.results)})"
        return f"{instruction} [SEP] Back to Search [SEP] {head} [SEP] Next > [SEP] {listed}"
    product = session.product
    assert product is not None
    if session.page == "bought":
        return (
            "Thank you for shopping with us! [SEP] Your code: [SEP] None [SEP] Purchased [SEP] "
            f"asin [SEP] {product.asin} [SEP] Your score (min 0.0, max 1.0) [SEP] {reward}"
        )
    options = " [SEP] ".join(
        f"{group} [SEP] {' [SEP] '.join(values)}" for group, values in product.options.items()
    )
    parts = ["Back to Search", "< Prev", options, product.title, f"Price: ${product.price}"]
    parts += ["Rating: N.A.", "Description", "Features", "Reviews", "Buy Now"]
    return f"{instruction} [SEP] " + " [SEP] ".join(p for p in parts if p)


def _clickables(session: ShopSession) -> list[str]:
    if session.page == "search":
        return ["search"]
    if session.page == "results":
        return ["back to search", "next >", *(p.asin.lower() for p in session.results)]
    if session.page == "item":
        assert session.product is not None
        values = [v for vs in session.product.options.values() for v in vs]
        return [
            "back to search",
            "< prev",
            *values,
            "description",
            "features",
            "reviews",
            "buy now",
        ]
    return []


def _purchase_reward(session: ShopSession) -> float:
    """WebShop's form: (options matched + price ok) / (options asked + 1), times a type
    score (1 for the asked product, 0.5 for another)."""
    product, goal = session.product, session.goal
    assert product is not None
    matched = sum(session.chosen.get(group) == value for group, value in goal.options.items())
    price_ok = product.price <= goal.max_price
    r_type = 1.0 if product.asin == goal.asin else 0.5
    return round((matched + price_ok) / (len(goal.options) + 1) * r_type, 4)


def _shop_step(session: ShopSession, action: str) -> tuple[float, bool]:
    """Play `search[...]`/`click[...]`; anything else, or a value not on the page, does nothing."""
    found = re.fullmatch(r"(search|click)\[(.*)\]", action.strip(), re.DOTALL)
    if not found:
        return 0.0, False
    verb, value = found.group(1), found.group(2).strip()
    if verb == "search":
        if session.page == "search":
            words = set(value.lower().split())
            session.results = tuple(p for p in PRODUCTS if words & set(p.title.lower().split()))
            session.page = "results"
        return 0.0, False
    value = value.lower()
    if value not in _clickables(session):
        return 0.0, False
    if value == "back to search":
        session.page, session.product, session.chosen = "search", None, {}
    elif session.page == "results" and value not in ("next >",):
        session.product = next(p for p in session.results if p.asin.lower() == value)
        session.page = "item"
    elif session.page == "item" and value == "buy now":
        session.page = "bought"
        return _purchase_reward(session), True
    elif session.page == "item" and session.product is not None:
        for group, values in session.product.options.items():
            if value in values:
                session.chosen[group] = value
    return 0.0, False


class _ShopReset(BaseModel):
    env_idx: int
    session_id: int | None = None


class _ShopStep(BaseModel):
    env_idx: int
    action: str


def _numbered(tasks: dict[int, T], ids: Sequence[int] | None) -> dict[int, T]:
    """The fake's tasks under the ids a run asks for (default: their own)."""
    return tasks if ids is None else dict(zip(ids, tasks.values(), strict=False))


def fake_agentgym_webshop(
    capacity: int = 8000, session_ids: Sequence[int] | None = None
) -> FastAPI:
    """AgentGym's WebShop server: `/create` answers a bare random int and, once `capacity`
    sessions exist (8,000 in AgentGym), ids it already gave; `/reset` answers
    `[observation, null]`; `/step` answers `state`; an unknown id is an HTTP 500; no `/close`.
    `app.state.steps` lists, per step, the session id and the goal it then held; steps take
    `app.state.step_delay_s` seconds."""
    goals = _numbered(WEBSHOP_GOALS, session_ids)
    app = FastAPI()
    app.state.received, app.state.steps, app.state.step_delay_s = [], [], 0.0
    sessions: dict[int, ShopSession] = {}
    new_id = _recycling_create(app, capacity, 48950076)

    @app.get("/")
    async def hello() -> str:
        return "ok"

    @app.get("/list_envs")
    async def list_envs() -> list[int]:
        return list(sessions)

    @app.post("/create")
    async def create(request: Request) -> int:
        await _recorded(app, request)
        env_idx = new_id()
        sessions.setdefault(env_idx, ShopSession(next(iter(goals.values()))))
        return env_idx

    @app.post("/reset")
    async def reset(body: _ShopReset, request: Request) -> tuple[str, None]:
        await _recorded(app, request)
        sessions[body.env_idx]  # an unknown id raises: HTTP 500, as AgentGym's
        goal = goals[body.session_id] if body.session_id is not None else next(iter(goals.values()))
        sessions[body.env_idx] = ShopSession(goal)
        await asyncio.sleep(0.02)  # building a page takes a while: resets overlap
        return _shop_observation(sessions[body.env_idx]), None

    @app.post("/step")
    async def step(body: _ShopStep, request: Request) -> dict[str, Any]:
        await _recorded(app, request)
        session = sessions[body.env_idx]
        await asyncio.sleep(app.state.step_delay_s)
        app.state.steps.append((body.env_idx, session.goal))
        reward, done = _shop_step(session, body.action)
        return {
            "state": _shop_observation(session, reward),
            "reward": reward,
            "done": done,
            "info": None,
        }

    @app.get("/observation")
    async def observation(env_idx: int) -> str:
        return _shop_observation(sessions[env_idx])

    @app.get("/available_actions")
    async def available_actions(env_idx: int) -> dict[str, Any]:
        session = sessions[env_idx]
        return {"has_search_bar": session.page == "search", "clickables": _clickables(session)}

    @app.get("/instruction_text")
    async def instruction_text(env_idx: int) -> str:
        return f"Instruction: {sessions[env_idx].goal.instruction}"

    return app


def webshop_player(messages: Messages) -> str:
    """Search the goal's keywords, open its product, choose its options, buy."""
    goal = next(g for g in WEBSHOP_GOALS.values() if g.instruction in messages[2]["content"])
    page = messages[-1]["content"]
    done_before = [m["content"] for m in messages if m["role"] == "assistant"]
    if page.endswith("[SEP] Search"):
        action = f"search[{goal.keywords}]"
    elif "Total results" in page:
        action = f"click[{goal.asin}]"
    else:
        wanted = [f"click[{v}]" for v in goal.options.values()]
        pending = [a for a in wanted if not any(a in said for said in done_before)]
        action = pending[0] if pending else "click[Buy Now]"
    return f"Thought:\nI think this is the next step.\n\nAction: \n{action}"


# --- SQLGym (agentgym.md 1.6) -------------------------------------------------------------

SQL_DATABASE = """
CREATE TABLE singer (name TEXT, country TEXT, age INTEGER);
INSERT INTO singer VALUES ('Ana', 'France', 31), ('Bo', 'Sweden', 45), ('Cleo', 'France', 27);
"""
SQL_SCHEMA = (
    "The database has one table, singer, with columns name (TEXT), country (TEXT) and age "
    "(INTEGER)."
)


@dataclass(frozen=True)
class SqlTask:
    question: str
    gold: str


SQL_TASKS = {  # item ids: the first two of AgentGym's test split, one of its train split
    10874: SqlTask(
        "How many singers are from France?", "SELECT COUNT(*) FROM singer WHERE country = 'France'"
    ),
    9469: SqlTask(
        "What is the name of the oldest singer?",
        "SELECT name FROM singer ORDER BY age DESC LIMIT 1",
    ),
    931: SqlTask(
        "List the names of singers younger than 30.", "SELECT name FROM singer WHERE age < 30"
    ),
}


class _SqlReset(BaseModel):
    env_idx: int
    item_id: int


class _SqlStep(BaseModel):
    env_idx: int
    action: str


def _run_sql(connection: sqlite3.Connection, sql: str) -> list[tuple[Any, ...]] | Exception:
    try:
        return connection.execute(sql).fetchall()
    except sqlite3.Error as failure:
        return failure


def fake_agentgym_sqlgym(item_ids: Sequence[int] | None = None) -> FastAPI:
    """AgentGym's SQLGym server: 8 slots (a random bare int each, then the same 8 ids handed
    out round-robin, so two episodes can share one); `/reset` answers `[schema + question,
    null]`; `/step` runs the SQL on SQLite and answers the result (100 characters at most),
    reward 1 iff its rows equal the gold query's as sets, done, and the gold SQL in `info`; no
    `/close`. `app.state.steps` lists the slot and the task it held when each step ran."""
    tasks = _numbered(SQL_TASKS, item_ids)
    app = FastAPI()
    app.state.received, app.state.steps = [], []
    slots: dict[int, tuple[sqlite3.Connection, SqlTask] | None] = {}
    new_id = _recycling_create(app, 8, 489576)

    @app.get("/")
    async def hello() -> str:
        return "ok"

    @app.post("/create")
    async def create(request: Request) -> int:
        await _recorded(app, request)
        env_idx = new_id()
        slots.setdefault(env_idx, None)
        return env_idx

    @app.post("/reset")
    async def reset(body: _SqlReset, request: Request) -> tuple[str, None]:
        await _recorded(app, request)
        slots[body.env_idx]  # an unknown id raises: HTTP 500, as AgentGym's
        connection = sqlite3.connect(":memory:", check_same_thread=False)
        connection.executescript(SQL_DATABASE)
        chosen = tasks[body.item_id]
        slots[body.env_idx] = (connection, chosen)
        await asyncio.sleep(0.02)  # opening the database takes a while: resets overlap
        return f"{SQL_SCHEMA}\n\n{chosen.question}", None

    @app.post("/step")
    async def step(body: _SqlStep, request: Request) -> dict[str, Any]:
        await _recorded(app, request)
        held = slots[body.env_idx]
        assert held is not None, "step before reset"  # AgentGym: HTTP 500 as well
        connection, chosen = held
        app.state.steps.append((body.env_idx, chosen))
        rows = _run_sql(connection, body.action)
        gold = _run_sql(connection, chosen.gold)
        reward = float(not isinstance(rows, Exception) and set(rows) == set(gold))
        state = str(rows)
        state = state[:100] + "..." if len(state) > 100 else state
        return {
            "state": state,
            "reward": reward,
            "done": True,
            "info": {"ground_truth": chosen.gold},
        }

    return app


def sqlgym_player(messages: Messages) -> str:
    """The gold SQL of the question shown, in AgentGym's reply format."""
    chosen = next(t for t in SQL_TASKS.values() if t.question in messages[-1]["content"])
    return f"Thought: I count the matching rows.\n\nAction: ```sql\n{chosen.gold};\n```"


# --- ALFWorld (agentgym.md 1.4) -----------------------------------------------------------


@dataclass(frozen=True)
class HouseholdGame:
    task: str
    contents: dict[str, tuple[str, ...]]
    goal_object: str
    goal_place: str
    solution: tuple[str, ...]


ALFWORLD_GAMES = {  # game ids: the first two of AgentGym's test split, one of its train split
    2420: HouseholdGame(
        "put some mug on desk.",
        {"countertop 1": ("mug 1",), "desk 1": (), "cabinet 1": ()},
        "mug",
        "desk 1",
        (
            "go to countertop 1",
            "take mug 1 from countertop 1",
            "go to desk 1",
            "put mug 1 in/on desk 1",
        ),
    ),
    2421: HouseholdGame(
        "put a book in cabinet.",
        {"desk 1": ("book 1", "pen 1"), "cabinet 1": ()},
        "book",
        "cabinet 1",
        (
            "go to desk 1",
            "take book 1 from desk 1",
            "go to cabinet 1",
            "put book 1 in/on cabinet 1",
        ),
    ),
    0: HouseholdGame(
        "put a pen in drawer.",
        {"desk 1": ("pen 1",), "drawer 1": ()},
        "pen",
        "drawer 1",
        ("go to desk 1", "take pen 1 from desk 1", "go to drawer 1", "put pen 1 in/on drawer 1"),
    ),
}


@dataclass
class Household:
    game: HouseholdGame
    contents: dict[str, list[str]]
    at: str | None = None
    holding: str | None = None
    done: bool = False


def _admissible(house: Household) -> list[str]:
    actions = [f"go to {place}" for place in house.contents if place != house.at]
    if house.at is not None and house.holding is None:
        actions += [f"take {thing} from {house.at}" for thing in house.contents[house.at]]
    if house.at is not None and house.holding is not None:
        actions.append(f"put {house.holding} in/on {house.at}")
    return [*actions, "inventory", "look"]


def _household_step(house: Household, action: str) -> str:
    if action not in _admissible(house):
        return "Nothing happened."
    if action.startswith("go to "):
        house.at = action.removeprefix("go to ")
        things = ", ".join(f"a {t}" for t in house.contents[house.at]) or "nothing"
        return f"You arrive at {house.at}. On the {house.at}, you see {things}."
    if action.startswith("take "):
        thing = action.removeprefix("take ").split(" from ")[0]
        assert house.at is not None
        house.contents[house.at].remove(thing)
        house.holding = thing
        return f"You pick up the {thing} from the {house.at}."
    if action.startswith("put "):
        thing, place = house.holding, house.at
        assert thing is not None and place is not None
        house.contents[place].append(thing)
        house.holding = None
        house.done = thing.startswith(house.game.goal_object) and place == house.game.goal_place
        return f"You put the {thing} in/on the {place}."
    if action == "inventory":
        return (
            f"You are carrying: a {house.holding}."
            if house.holding
            else "You are not carrying anything."
        )
    return "You are in the middle of a room."


class _HouseReset(BaseModel):
    id: int
    game: int
    world_type: str = "Text"


class _HouseStep(BaseModel):
    id: int
    action: str


def fake_agentgym_alfworld(game_ids: Sequence[int] | None = None) -> FastAPI:
    """AgentGym's ALFWorld server: `/create` answers `{"id"}`; `/reset` (`game`, `world_type`)
    answers the observation, `available_actions` and `task_type`; `/step` answers `reward`
    = won, `available_actions` and `done`; errors are HTTP 200 `{"error"}`; no `/close`.
    Its handlers run one at a time, as AgentGym's (`async def` around blocking work);
    `app.state.most_waiting` is the most requests it ever held at once (queued or running)."""
    games = _numbered(ALFWORLD_GAMES, game_ids)
    app = FastAPI()
    app.state.received, app.state.most_waiting = [], 0
    houses: dict[int, Household | None] = {}
    one_at_a_time = asyncio.Lock()
    waiting = [0]

    @app.middleware("http")
    async def count_waiting(request: Request, call_next: Callable[..., Any]) -> Any:
        waiting[0] += 1
        app.state.most_waiting = max(app.state.most_waiting, waiting[0])
        try:
            async with one_at_a_time:
                await asyncio.sleep(0.005)  # the blocking work
                return await call_next(request)
        finally:
            waiting[0] -= 1

    @app.get("/")
    def hello() -> str:
        return "This is environment AlfWorld."

    @app.post("/create")
    async def create(request: Request) -> dict[str, int]:
        await _recorded(app, request)
        houses[len(houses)] = None
        return {"id": len(houses) - 1}

    @app.post("/reset")
    async def reset(body: _HouseReset, request: Request) -> dict[str, Any]:
        await _recorded(app, request)
        if body.id not in houses:
            return {"error": f"The id {body.id} is not valid."}
        if body.world_type not in ("Text", "Embody", "Hybrid"):
            return {"error": 'world_type must be one of "Text", "Embody" and "Hybrid"'}
        if body.game not in games:
            return {"error": "list index out of range"}
        game = games[body.game]
        house = Household(game, {place: list(things) for place, things in game.contents.items()})
        houses[body.id] = house
        places = ", ".join(f"a {place}" for place in game.contents)
        observation = (
            f"You are in the middle of a room. Looking quickly around you, you see {places}.\n"
            f"Your task is to: {game.task}"
        )
        return {
            "id": body.id,
            "observation": observation,
            "available_actions": _admissible(house),
            "task_type": "pick_and_place_simple",
        }

    @app.post("/step")
    async def step(body: _HouseStep, request: Request) -> dict[str, Any]:
        await _recorded(app, request)
        house = houses.get(body.id)
        if house is None:
            return {"error": f"The id {body.id} is not valid."}
        if house.done:
            return {"error": f"The task with environment {body.id} has finished."}
        observation = _household_step(house, body.action)
        return {
            "observation": observation,
            "reward": float(house.done),
            "available_actions": _admissible(house),
            "done": house.done,
        }

    return app


def alfworld_player(messages: Messages) -> str:
    """The game's solution, one action a turn, as AgentGym's `Action:` reply."""
    game = next(g for g in ALFWORLD_GAMES.values() if g.task in messages[2]["content"])
    turn = sum(m["role"] == "assistant" for m in messages) - 1
    return f"Thought:\nNext step of the plan.\n\nAction:\n{game.solution[turn]}"


# --- SearchQA (agentgym.md 1.7) -----------------------------------------------------------

SEARCH_INSTRUCTIONS = (
    "You must reason inside <think>...</think> first. If you do not have enough knowledge, "
    "issue a <search>...</search> and then STOP. Do not generate <information> or <answer> "
    "yet. Wait for external input wrapped in <information>...</information>. After receiving "
    "information, reason again in <think>. If confident, output your final answer in "
    "<answer>...</answer>. Do not output <answer> before receiving <information> unless you "
    "are fully confident. If you find no further external knowledge needed, you can directly "
    "provide the answer inside <answer> and </answer>, without detailed illustrations. For "
    "example, <answer> Beijing </answer>. Follow this process every time."
)
CORPUS = (
    ("Lake Varna", "Lake Varna is the deepest lake of Ostland, 412 metres deep."),
    ("Ostland", "Ostland is a small country whose capital is Meridon."),
    ("Meridon", "Meridon was founded in 1204 by the river Sael."),
    ("Sael", "The Sael flows from the Grey Hills into Lake Varna."),
)


@dataclass(frozen=True)
class QaTask:
    question: str
    targets: tuple[str, ...]


QA_TASKS = {  # ids: the first two of AgentGym's test split, one of its train split
    12545: QaTask("What is the capital of Ostland?", ("Meridon",)),
    24044: QaTask("In which year was Meridon founded?", ("1204",)),
    51713: QaTask("Where does the Sael flow into?", ("Lake Varna", "Varna")),
}


def _normalized(text: str) -> str:
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def _search(query: str) -> str:
    words = set(_normalized(query).split())
    ranked = sorted(CORPUS, key=lambda doc: -len(words & set(_normalized(" ".join(doc)).split())))
    return "".join(f"Doc {n}(Title: {t}) {x}\n" for n, (t, x) in enumerate(ranked[:3], 1))


class _QaCreate(BaseModel):
    id: int


class _QaReset(BaseModel):
    env_idx: int
    id: int | None = None


class _QaStep(BaseModel):
    env_idx: int
    action: str


class _QaClose(BaseModel):
    env_idx: int


def fake_agentgym_searchqa(question_ids: Sequence[int] | None = None) -> FastAPI:
    """AgentGym's SearchQA server: `/create` needs `{"id"}` and answers a bare int (a
    counter); `/reset` answers the prompt with the question as a bare string; `/step` reads the
    first `<search>`/`<answer>` tag: a search answers the top 3 passages in `<information>`, an
    answer ends the episode with reward 1 if the last `<answer>` matches exactly (normalised),
    else says so and play goes on; `/close` answers true, then false."""
    tasks = _numbered(QA_TASKS, question_ids)
    app = FastAPI()
    app.state.received = []
    questions: dict[int, QaTask] = {}
    counter = iter(range(1_000_000))

    def prompt(chosen: QaTask) -> str:
        return f"{SEARCH_INSTRUCTIONS}\n\n Question: {chosen.question.strip()}"

    @app.get("/")
    def hello() -> str:
        return "ok"

    @app.post("/create")
    async def create(body: _QaCreate, request: Request) -> int:
        await _recorded(app, request)
        env_idx = next(counter)
        questions[env_idx] = tasks[body.id]
        return env_idx

    @app.post("/reset")
    async def reset(body: _QaReset, request: Request) -> str:
        await _recorded(app, request)
        questions[body.env_idx]  # an unknown id raises: HTTP 500, as AgentGym's
        questions[body.env_idx] = tasks[body.id] if body.id is not None else QA_TASKS[12545]
        return prompt(questions[body.env_idx])

    @app.post("/step")
    async def step(body: _QaStep, request: Request) -> dict[str, Any]:
        await _recorded(app, request)
        chosen = questions[body.env_idx]
        tag = re.search(r"<(search|answer)>(.*?)</\1>", body.action, re.DOTALL)
        reward, done = 0.0, False
        if tag is None:
            observation = (
                "Your previous action is invalid. If you want to search, you should put the "
                "query between <search> and </search>. If you want to give the final answer, "
                "you should put the answer between <answer> and </answer>. Please try again."
            )
        elif tag.group(1) == "search":
            observation = f"<information>{_search(tag.group(2).strip()).strip()}</information>"
        else:
            answer = re.findall(r"<answer>(.*?)</answer>", body.action, re.DOTALL)[-1]
            done = _normalized(answer) in {_normalized(t) for t in chosen.targets}
            reward = float(done)
            observation = (
                "Congratulations! You have answered the question correctly."
                if done
                else "Sorry, your answer is incorrect. Please try again."
            )
        return {"observation": observation, "reward": reward, "done": done, "info": None}

    @app.get("/observation")
    async def observation(env_idx: int) -> str:
        return prompt(questions[env_idx])

    @app.post("/close")
    async def close(body: _QaClose, request: Request) -> bool:
        await _recorded(app, request)
        return questions.pop(body.env_idx, None) is not None

    return app


def searchqa_player(messages: Messages) -> str:
    """Search the question first; answer once the passages are in."""
    chosen = next(t for t in QA_TASKS.values() if t.question in messages[2]["content"])
    if not messages[-1]["content"].startswith("<information>"):
        return f"<think>I should look this up.</think>\n<search>{chosen.question}</search>"
    return f"<think>The passages say it.</think>\n<answer>{chosen.targets[0]}</answer>"


# --- SciWorld (agentgym.md 1.3), only what the client's session handling meets ------------


class _IdBody(BaseModel):
    id: int


def fake_agentgym_sciworld(first_close_s: float = 0.0) -> FastAPI:
    """AgentGym's SciWorld server, one boiling task: `/create` answers `{"id"}`; `/reset`
    answers the task description apart from the observation; a second `/close` of a session
    is an HTTP 500 (its JVM is gone). The first close takes `first_close_s` seconds."""
    app = FastAPI()
    app.state.received = []
    closed: set[int] = set()
    counter = iter(range(1_000_000))

    @app.get("/")
    def hello() -> str:
        return "This is environment ScienceWorld."

    @app.post("/create")
    async def create(request: Request) -> dict[str, int]:
        await _recorded(app, request)
        return {"id": next(counter)}

    @app.post("/reset")
    async def reset(request: Request) -> dict[str, Any]:
        body = await _recorded(app, request)
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
    async def step(request: Request) -> dict[str, Any]:
        body = await _recorded(app, request)
        if body.get("action") == "hang":
            await asyncio.sleep(1)
        return {"observation": "The water boils.", "reward": 100, "score": 100, "done": True}

    @app.post("/close")
    async def close(body: _IdBody, request: Request) -> bool:
        await _recorded(app, request)
        if body.id in closed:
            raise RuntimeError("the environment's JVM is already closed")  # HTTP 500
        closed.add(body.id)
        await asyncio.sleep(first_close_s)
        return True

    return app


def scripted_chat_endpoint(player: Callable[[Messages], str]) -> FastAPI:
    """An OpenAI-compatible `/v1/chat/completions` whose replies are `player(messages)`."""
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def completions(request: Request) -> dict[str, Any]:
        body = await request.json()
        message = {"role": "assistant", "content": player(body["messages"])}
        return {
            "id": "scripted",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0},
        }

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
