"""Task ids on servers that number tasks differently: probe, cache, map, import, refuse overlap."""

from __future__ import annotations

import json

import pytest

from agentgym_fakes import fake_agentgym_textcraft, shuffled_textcraft_goals
from agenttrain.envs.registry import get_spec
from agenttrain.envs.textcraft.env import describe
from agenttrain.envs.textcraft.tasks import num_tasks, splits, task
from agenttrain.serving.client import EnvServerPool
from agenttrain.serving.task_map import (
    TaskNotFound,
    TaskOverlap,
    TaskTableCache,
    TaskTableFileError,
    check_split_disjoint,
    local_task_table,
    read_task_table,
    translate_ids,
)
from support import health, serve_in_thread

ROOT = "This is environment TextCraft."


def goal(text: str) -> str:
    return str(describe(text)["goal"])


async def test_our_task_ids_show_our_goals_on_an_agentgym_server(tmp_path):
    app = fake_agentgym_textcraft(shuffled_textcraft_goals(seed=1))
    ids = [0, 12, 300, 543]
    assert all(app.state.goals[k] != k for k in ids)  # the server's id k is another goal
    with serve_in_thread(app) as url:
        async with EnvServerPool("textcraft", url, task_table_dir=tmp_path) as pool:
            env = pool.environment()
            shown = [goal((await env.reset(k)).text) for k in ids]
            result = await env.step("craft 1 nothing using 1 air")
    assert shown == [task(k).goal_name for k in ids]
    assert result.observation.startswith("Could not")  # the session still plays


async def test_train_ids_through_an_agentgym_server_never_reach_test_goals(tmp_path):
    test_goals = {task(k).goal_name for k in splits()["test"]}
    with serve_in_thread(fake_agentgym_textcraft(shuffled_textcraft_goals(seed=2))) as url:
        async with EnvServerPool("textcraft", url, task_table_dir=tmp_path) as pool:
            env = pool.environment()
            reached = {goal((await env.reset(k)).text) for k in splits()["train"]}
    assert reached == {task(k).goal_name for k in splits()["train"]}
    assert not reached & test_goals


async def test_the_probe_runs_once_per_server(tmp_path):
    app = fake_agentgym_textcraft(shuffled_textcraft_goals(seed=3))
    with serve_in_thread(app) as url:
        async with EnvServerPool("textcraft", url, task_table_dir=tmp_path) as pool:
            await pool.verify()
            await pool.verify()
        probe_resets = app.state.resets
        assert probe_resets >= num_tasks()  # every server id was read once
        cached = read_task_table(TaskTableCache(tmp_path).path(url, ROOT))
        assert cached.keys == {i: task(k).goal_name for i, k in enumerate(app.state.goals)}

        async with EnvServerPool("textcraft", url, task_table_dir=tmp_path) as pool:
            first = await pool.environment().reset(12)
    assert goal(first.text) == task(12).goal_name
    assert app.state.resets - probe_resets < num_tasks()  # a spot check, not a second probe


async def test_a_stale_cached_table_is_detected_and_replaced(tmp_path):
    app = fake_agentgym_textcraft(shuffled_textcraft_goals(seed=4))
    with serve_in_thread(app) as url:
        async with EnvServerPool("textcraft", url, task_table_dir=tmp_path) as pool:
            await pool.verify()
        app.state.goals = shuffled_textcraft_goals(seed=5)  # another install, same URL
        before = app.state.resets
        async with EnvServerPool("textcraft", url, task_table_dir=tmp_path) as pool:
            await pool.verify()
            first = await pool.environment().reset(12)
    assert app.state.resets - before >= num_tasks()  # probed again
    assert goal(first.text) == task(12).goal_name
    cached = read_task_table(TaskTableCache(tmp_path).path(url, ROOT))
    assert cached.keys == {i: task(k).goal_name for i, k in enumerate(app.state.goals)}


async def test_a_server_renumbering_mid_run_is_followed(tmp_path):
    app = fake_agentgym_textcraft(shuffled_textcraft_goals(seed=6))
    with serve_in_thread(app) as url:
        async with EnvServerPool("textcraft", url, task_table_dir=tmp_path) as pool:
            env = pool.environment()
            before = goal((await env.reset(12)).text)
            app.state.goals = shuffled_textcraft_goals(seed=7)
            after = goal((await env.reset(12)).text)
    assert before == after == task(12).goal_name


async def test_our_own_server_needs_no_probe(start_textcraft, tmp_path):
    url = start_textcraft().url
    async with EnvServerPool("textcraft", url, task_table_dir=tmp_path) as pool:
        await pool.verify()
        first = await pool.environment().reset(12)
    assert goal(first.text) == task(12).goal_name
    assert health(url)["sessions_created"] == 1  # the episode's session only
    assert not list(tmp_path.iterdir())


async def test_a_goal_the_server_lacks_is_named(tmp_path):
    app = fake_agentgym_textcraft(shuffled_textcraft_goals(seed=8, left_out={12, 40}))
    with serve_in_thread(app) as url:
        async with EnvServerPool("textcraft", url, task_table_dir=tmp_path) as pool:
            await pool.check_tasks([0, 1, 2])
            with pytest.raises(TaskNotFound) as up_front:
                await pool.check_tasks(range(100))
            with pytest.raises(TaskNotFound) as on_reset:
                await pool.environment().reset(12)
    assert "lacks 2 of the textcraft tasks asked for" in str(up_front.value)
    assert all(repr(task(k).goal_name) in str(up_front.value) for k in (12, 40))
    assert repr(task(12).goal_name) in str(on_reset.value)
    assert url in str(on_reset.value) and url in str(up_front.value)


async def test_a_published_table_reproduces_another_split(tmp_path):
    theirs = shuffled_textcraft_goals(seed=9)  # their server's numbering
    their_test_ids = [3, 40, 500]
    published = tmp_path / "textcraft_ids.json"
    published.write_text(
        json.dumps(
            {"env": "textcraft", "tasks": {str(i): task(theirs[i]).goal_name for i in range(544)}}
        )
    )
    ours = await local_task_table(get_spec("textcraft"))
    assert translate_ids(their_test_ids, read_task_table(published), ours) == [
        theirs[i] for i in their_test_ids
    ]


async def test_train_and_test_ids_naming_one_goal_are_refused():
    ours = await local_task_table(get_spec("textcraft"))
    check_split_disjoint(splits()["train"], splits()["test"], ours)
    leaked = splits()["test"][7]
    with pytest.raises(TaskOverlap) as caught:
        check_split_disjoint([*splits()["train"], leaked], splits()["test"], ours)
    assert f"{task(leaked).goal_name!r} (test id {leaked})" in str(caught.value)


@pytest.mark.parametrize(
    "content",
    ["[1, 2]", '{"env": "textcraft", "tasks": {"a": "stick"}}', '{"tasks": {}}', "not json"],
)
def test_a_malformed_table_file_is_a_clear_error(tmp_path, content):
    path = tmp_path / "table.json"
    path.write_text(content)
    with pytest.raises(TaskTableFileError, match=str(path)):
        read_task_table(path)
