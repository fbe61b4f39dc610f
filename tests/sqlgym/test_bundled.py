"""The bundled task set: databases and questions generated the same way everywhere, fixed
splits, gold SQL that answers, and AgentGym's schema text."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from agenttrain.envs import get_spec, registrations
from agenttrain.envs.sqlgym.bundled import bundled_tasks
from agenttrain.envs.sqlgym.questions import questions

FINGERPRINT = """
import json
from agenttrain.envs.sqlgym.bundled import bundled_tasks
from agenttrain.envs.sqlgym.databases import databases
tasks = bundled_tasks()
print(json.dumps({
    "splits": tasks.splits(),
    "tasks": [[t.observation, t.gold_sql] for t in tasks.tasks],
    "rows": {db.db_id: [table.rows for table in db.tables] for db in databases().values()},
}))
"""


def fingerprint_in_a_new_process(hash_seed: str) -> dict:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    env.pop("AGENTTRAIN_BIRD_DIR", None)
    out = subprocess.run(
        [sys.executable, "-c", FINGERPRINT], capture_output=True, text=True, env=env, check=True
    ).stdout
    return json.loads(out)


def test_tasks_data_and_splits_are_the_same_in_every_process():
    first, second = fingerprint_in_a_new_process("1"), fingerprint_in_a_new_process("2")
    assert first == second
    here = bundled_tasks()
    assert first["splits"] == {name: list(ids) for name, ids in here.splits().items()}
    assert first["tasks"] == [[t.observation, t.gold_sql] for t in here.tasks]


def test_splits_are_disjoint_and_cover_every_task():
    splits = bundled_tasks().splits()
    assert set(splits) == {"train", "val", "test"}
    members = [i for ids in splits.values() for i in ids]
    assert sorted(members) == list(range(len(bundled_tasks().tasks)))
    assert len(splits["test"]) >= 40 and len(splits["train"]) >= 150


def test_the_registered_spec_is_in_process_over_the_bundled_set():
    entry = next(r for r in registrations() if r.spec.name == "sqlgym")
    assert entry.in_process
    spec = get_spec("sqlgym")
    assert spec.num_tasks == len(bundled_tasks().tasks) >= 200
    assert spec.splits() == bundled_tasks().splits()
    assert spec.protocol.id_field == "env_idx" and spec.protocol.task_field == "item_id"


def test_several_themed_databases_and_every_kind_of_question():
    asked = questions()
    assert len({q.db_id for q in asked}) == 5
    assert {q.kind for q in asked} == {"filter", "count", "group", "aggregate", "order", "join"}


def test_every_gold_query_runs_and_returns_rows():
    tasks = bundled_tasks()
    for task in tasks.tasks:
        assert tasks.connect(task).execute(task.gold_sql).fetchall(), task.question


def test_top_answers_are_never_ties():
    tasks = bundled_tasks()
    for task in tasks.tasks:
        if task.gold_sql.endswith("LIMIT 1"):
            widened = task.gold_sql.replace("LIMIT 1", "LIMIT 2")
            connection = tasks.connect(task)
            order_by = widened.split("ORDER BY ")[1].split(" DESC")[0].split(" ASC")[0]
            keyed = widened.replace("SELECT ", f"SELECT {order_by}, ", 1)
            first, second = connection.execute(keyed).fetchall()
            assert first[0] != second[0], task.question


def test_the_observation_is_agentgyms_schema_text_and_question():
    task = next(t for t in bundled_tasks().tasks if t.db_id == "bookshop")
    schema, question = task.observation.split("\n\n")
    assert schema == (
        "bookshop contains tables such as authors, books. "
        "Table authors has columns such as author_id, name, country, birth_year. "
        "author_id is the primary key. "
        "Table books has columns such as book_id, title, author_id, genre, price, pages. "
        "book_id is the primary key. "
        "The author_id of books is the foreign key of author_id of authors."
    )
    assert question == task.question
