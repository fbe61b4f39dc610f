"""SQLGym's execution-match reward and answers, as AgentGym's server gives them (§1.6)."""

from __future__ import annotations

import asyncio

import pytest

from agenttrain.envs import EnvironmentNotReset, get_spec, make_env
from agenttrain.envs.sqlgym.bundled import UnknownTask, bundled_tasks


def play(sql: str, task_id: int = 0, **kwargs: object):
    """Reset to `task_id`, run `sql`, close; the step's result."""

    async def episode():
        env = make_env("sqlgym", **kwargs)
        try:
            await env.reset(task_id)
            return await env.step(sql)
        finally:
            await env.close()

    return asyncio.run(episode())


def gold(task_id: int) -> str:
    return bundled_tasks().task(task_id).gold_sql


def rows_of(sql: str, task_id: int) -> list[tuple]:
    tasks = bundled_tasks()
    return tasks.connect(tasks.task(task_id)).execute(sql).fetchall()


def task_where(predicate) -> int:
    return next(t.task_id for t in bundled_tasks().tasks if predicate(t))


def test_the_gold_sql_scores_1_and_answers_its_rows():
    task_id = task_where(lambda t: t.gold_sql.startswith("SELECT COUNT(*)"))
    result = play(gold(task_id), task_id)
    assert (result.reward, result.done) == (1.0, True)
    assert result.observation == str(rows_of(gold(task_id), task_id))
    assert result.info == {"ground_truth": gold(task_id)}


def test_rows_match_as_sets_whatever_their_order():
    task_id = task_where(lambda t: t.gold_sql.startswith("SELECT name FROM authors WHERE"))
    reordered = gold(task_id) + " ORDER BY name DESC"
    assert len(rows_of(reordered, task_id)) > 1
    assert play(reordered, task_id).reward == 1.0


def test_a_wrong_query_scores_0_and_shows_its_rows():
    task_id = task_where(lambda t: t.gold_sql.startswith("SELECT COUNT(*)"))
    result = play("SELECT 123456789", task_id)
    assert (result.reward, result.done, result.observation) == (0.0, True, "[(123456789,)]")


def test_a_syntax_error_scores_0_with_sqlites_message():
    result = play("SELEC name FROM authors")
    assert (result.reward, result.done) == (0.0, True)
    assert result.observation == 'near "SELEC": syntax error'


def test_an_unknown_table_is_reported_by_name():
    assert play("SELECT * FROM nowhere").observation == "no such table: nowhere"


def test_long_results_are_cut_to_100_characters_as_the_server_does():
    task_id = task_where(lambda t: t.db_id == "bookshop")
    result = play("SELECT * FROM books", task_id)
    assert result.observation == str(rows_of("SELECT * FROM books", task_id))[:100] + "..."


def test_an_answer_cannot_change_the_database_the_next_episode_sees():
    task_id = task_where(lambda t: t.gold_sql.startswith("SELECT COUNT(*)"))
    refused = play("DELETE FROM authors", task_id)
    assert (refused.reward, refused.observation) == (0.0, "attempt to write a readonly database")
    assert play(gold(task_id), task_id).reward == 1.0


def test_a_runaway_query_is_stopped_and_reported():
    cross_join = "SELECT COUNT(*) FROM books, books AS b, books AS c, books AS d"
    result = play(cross_join, sql_step_limit=100_000)
    assert (result.reward, result.observation) == (0.0, "interrupted")


def test_two_statements_are_refused_as_sqlite3_refuses_them():
    result = play("SELECT 1; SELECT 2")
    assert result.reward == 0.0 and "one statement at a time" in result.observation


def test_step_before_reset_is_an_error():
    env = make_env("sqlgym")
    with pytest.raises(EnvironmentNotReset):
        asyncio.run(env.step("SELECT 1"))


def test_an_unknown_task_is_refused_naming_the_range():
    env = make_env("sqlgym")
    count = len(bundled_tasks().tasks)
    with pytest.raises(UnknownTask, match=f"tasks 0-{count - 1}, not {count}"):
        asyncio.run(env.reset(count))


def test_the_reply_is_read_as_agentgyms_client_reads_it():
    reply = "Thought: count them.\n\nAction: ```sql\nSELECT COUNT(*) FROM books;\n```"
    assert get_spec("sqlgym").parse_action(reply) == "SELECT COUNT(*) FROM books;"
    assert get_spec("sqlgym").default_max_turns == 1
