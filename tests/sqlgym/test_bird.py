"""A BIRD-layout folder read as AgentGym's SQLGym server reads it: its ids, splits, schema
text and reward, and clear errors when the folder is not there or not complete."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from agenttrain.envs import make_env
from agenttrain.envs.sqlgym.bird import BirdLayoutError

SCHEMA = {
    "db_id": "shop",
    "table_names_original": ["customers", "orders"],
    "table_names": ["Customers", "Orders"],
    "column_names_original": [
        [-1, "*"],
        [0, "customer_id"],
        [0, "name"],
        [0, "city"],
        [1, "order_id"],
        [1, "customer_id"],
        [1, "amount"],
    ],
    "column_names": [
        [-1, "*"],
        [0, "Customer ID"],
        [0, "name"],
        [0, "city"],
        [1, "order id"],
        [1, "customer id"],
        [1, "amount"],
    ],
    "column_types": ["text", "integer", "text", "text", "integer", "integer", "integer"],
    "primary_keys": [1, 4],
    "foreign_keys": [[5, 1]],
}
SCHEMA_TEXT = (  # what sqlgym==0.1.2 writes for SCHEMA (checked against the package)
    "shop contains tables such as customers, orders. "
    "Table customers has columns such as customer id, name, city. customer id is the primary key. "
    "Table orders has columns such as order id, customer id, amount. order id is the primary key. "
    "The amount of orders is the foreign key of name of customers."
)
QUESTIONS = {
    "train": [
        ("How many customers live in Lyon?", "SELECT COUNT(*) FROM customers WHERE city = 'Lyon'"),
        ("What is the largest order amount?", "SELECT MAX(amount) FROM orders"),
    ],
    "dev": [
        (
            "Which customers placed an order over 50?",
            "SELECT DISTINCT T1.name FROM customers AS T1 INNER JOIN orders AS T2 "
            "ON T1.customer_id = T2.customer_id WHERE T2.amount > 50",
        )
    ],
}


def write_bird(root: Path) -> Path:
    """A BIRD-shaped folder: train and dev, one database `shop` in each."""
    for part, questions in QUESTIONS.items():
        folder = root / part
        database = folder / f"{part}_databases" / "shop" / "shop.sqlite"
        database.parent.mkdir(parents=True)
        items = [
            {"db_id": "shop", "question": q, "evidence": "", "SQL": sql, "difficulty": "simple"}
            for q, sql in questions
        ]
        (folder / f"{part}.json").write_text(json.dumps(items))
        (folder / f"{part}_tables.json").write_text(json.dumps([SCHEMA]))
        with sqlite3.connect(database) as connection:
            connection.executescript(
                "CREATE TABLE customers (customer_id INTEGER PRIMARY KEY, name TEXT, city TEXT);"
                "CREATE TABLE orders (order_id INTEGER PRIMARY KEY, customer_id INTEGER, "
                "amount INTEGER);"
                "INSERT INTO customers VALUES (1, 'Ana', 'Lyon'), (2, 'Bo', 'Porto'), "
                "(3, 'Cy', 'Lyon');"
                "INSERT INTO orders VALUES (1, 1, 70), (2, 1, 80), (3, 2, 20), (4, 3, 60);"
            )
        connection.close()
    return root


@pytest.fixture
def bird(tmp_path: Path) -> Path:
    return write_bird(tmp_path / "bird")


def run(bird_dir: Path, task_id: int, sql: str | None = None):
    async def episode():
        env = make_env("sqlgym", bird_dir=str(bird_dir))
        try:
            first = await env.reset(task_id)
            return first, (await env.step(sql) if sql is not None else None), env.spec
        finally:
            await env.close()

    return asyncio.run(episode())


def test_the_observation_is_the_servers_schema_text_and_question(bird):
    first, _, _ = run(bird, 0)
    assert first.text == f"{SCHEMA_TEXT}\n\nHow many customers live in Lyon?"
    assert first.info["db_id"] == "shop"


def test_task_ids_and_splits_are_agentgyms(bird):
    assert run(bird, 1)[0].text.endswith("What is the largest order amount?")
    assert run(bird, 9428)[0].text.endswith("Which customers placed an order over 50?")
    spec = run(bird, 0)[2]
    assert {name: list(ids) for name, ids in spec.splits().items()} == {
        "train": [0, 1],
        "test": [9428],
    }


def test_execution_match_on_a_bird_database(bird):
    gold = QUESTIONS["dev"][0][1]
    assert run(bird, 9428, gold)[1].reward == 1.0
    assert run(bird, 9428, "SELECT name FROM customers")[1].reward == 0.0
    wrong_column = run(bird, 9428, "SELECT nam FROM customers")[1]
    assert (wrong_column.reward, wrong_column.observation) == (0.0, "no such column: nam")


def test_bird_databases_open_read_only(bird):
    _, refused, _ = run(bird, 0, "DELETE FROM customers")
    assert refused.observation == "attempt to write a readonly database"
    assert run(bird, 0, QUESTIONS["train"][0][1])[1].observation == "[(2,)]"


def test_a_missing_folder_is_named(tmp_path):
    absent = tmp_path / "no-bird-here"
    with pytest.raises(BirdLayoutError, match=re.escape(f"BIRD folder {absent} does not exist")):
        make_env("sqlgym", bird_dir=str(absent))


def test_missing_files_are_listed(bird):
    (bird / "dev" / "dev_tables.json").unlink()
    expected = re.escape(f"BIRD folder {bird} lacks dev/dev_tables.json")
    with pytest.raises(BirdLayoutError, match=expected):
        make_env("sqlgym", bird_dir=str(bird))


def test_a_question_past_the_folders_data_is_refused(bird):
    with pytest.raises(BirdLayoutError, match=r"train question 2, but .* has 2"):
        run(bird, 2)


def agenttrain(*args: str, bird_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AGENTTRAIN_BIRD_DIR": str(bird_dir), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "agenttrain", *args], capture_output=True, text=True, env=env
    )


def test_agenttrain_bird_dir_selects_bird_for_eval(bird, tmp_path):
    out = tmp_path / "eval"
    args = ("eval", "--env", "sqlgym", "--model", "oracle", "--out", str(out))
    done = agenttrain(*args, bird_dir=bird)
    assert done.returncode == 0, done.stdout + done.stderr
    episode = json.loads((out / "oracle" / "episodes.jsonl").read_text())
    assert (episode["task_id"], episode["success"]) == (9428, True)


def test_a_wrong_agenttrain_bird_dir_stops_eval_with_its_name(tmp_path):
    absent = tmp_path / "typo"
    done = agenttrain("eval", "--env", "sqlgym", "--model", "oracle", bird_dir=absent)
    assert done.returncode == 2
    assert f"BIRD folder {absent} does not exist" in " ".join(done.stdout.split())
