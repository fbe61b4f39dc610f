"""ReMe's task-memory HTTP API over our pool (AgentEvolver's requests), and our client of it."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request

import pytest
from typer.testing import CliRunner

from agenttrain.agent.conversation import conversation_start
from agenttrain.agent.formats import get_format
from agenttrain.cli import app
from agenttrain.envs.registry import get_spec
from agenttrain.memory.pool import ExperiencePool
from agenttrain.memory.server import create_memory_app
from agenttrain.memory.service import (
    ExperienceService,
    LocalMemory,
    MemoryServiceError,
    ReMeClient,
)
from agenttrain.memory.summarize import RuleSummarizer
from agenttrain.rollout.trajectory import Trajectory, Turn, read_jsonl
from support import health, serve_in_thread

SYSTEM = {"role": "system", "content": "You are a Minecraft crafting agent. " * 40}


def post(url: str, path: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"{url}/{path}", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as answer:
        return answer.code, json.loads(answer.read())


def episode(goal: str, actions: list[tuple[str, str]]) -> list[dict]:
    messages = [SYSTEM, {"role": "user", "content": f"Crafting commands: ...\nGoal: craft {goal}."}]
    for action, observation in actions:
        messages.append({"role": "assistant", "content": f"Thought: next.\nAction: {action}"})
        messages.append({"role": "user", "content": observation})
    return messages


@pytest.fixture
def memory_url(tmp_path):
    app = create_memory_app(ExperiencePool(tmp_path / "pool.sqlite"), RuleSummarizer())
    with serve_in_thread(app) as url:
        yield url


def test_agentevolver_requests_round_trip(memory_url):
    assert health(memory_url) == {"status": "healthy"}
    summary = {
        "workspace_id": "ws",
        "trajectories": [
            {
                "messages": episode(
                    "stick", [("get 2 oak planks", "Got 2 planks"), ("craft 4 stick", "Crafted")]
                ),
                "score": 1.0,
            },
            {
                "messages": episode(
                    "iron bars", [("craft iron bars", "Could not find enough items to craft")] * 3
                ),
                "score": 0.0,
            },
            {"messages": episode("bread", [("get 3 wheat", "Got 3 wheat")]), "score": 1.0},
        ],
    }
    status, answer = post(memory_url, "summary_task_memory", summary)
    assert status == 200 and answer["success"] is True
    assert answer["metadata"]["update_result"] == {"deleted_count": 0, "inserted_count": 3}
    memories = json.loads(answer["answer"])
    assert {m["memory_type"] for m in memories} == {"task"}
    assert {"when_to_use", "content", "score", "memory_id", "workspace_id"} <= set(memories[0])
    assert "`craft iron bars` (3x: Could not find" in memories[1]["content"]

    # AgentEvolver's query: the JSON of the whole initial conversation.
    query = json.dumps([SYSTEM, {"role": "user", "content": "Goal: craft stick."}])
    status, answer = post(
        memory_url, "retrieve_task_memory", {"query": query, "top_k": 1, "workspace_id": "ws"}
    )
    assert status == 200
    assert answer["answer"].startswith("Memory 1 :\n When to use: Task: Crafting commands")
    assert "craft 4 stick" in answer["answer"]
    [memory] = answer["metadata"]["memory_list"]
    assert memory["content"] == memories[0]["content"]

    status, simple = post(
        memory_url,
        "retrieve_task_memory_simple",
        {"query": "craft iron bars", "top_k": 1, "workspace_id": "ws"},
    )
    assert simple["answer"].startswith("Previous Memory\n- Task:")
    assert "Avoid these actions" in simple["answer"]
    empty = {"query": "stick", "workspace_id": "x"}
    status, other = post(memory_url, "retrieve_task_memory", empty)
    assert other["answer"] == "" and other["metadata"]["memory_list"] == []


def test_trajectories_from_another_split_are_refused(memory_url):
    body = {
        "trajectories": [
            {
                "task_id": "17",
                "messages": episode("stick", [("craft 4 stick", "Crafted")]),
                "score": 1.0,
                "metadata": {"split": "test"},
            }
        ]
    }
    status, answer = post(memory_url, "summary_task_memory", body)
    assert status == 400
    assert "task 17 is from split 'test'" in answer["detail"]


def solved(task_id: int, goal: str) -> Trajectory:
    trajectory = Trajectory("e", "textcraft", task_id, "g", 0, 0, "m", success=True, reward=1.0)
    trajectory.messages = episode(goal, [("get 1 oak log", "Got 1 oak log")])
    trajectory.turns = [Turn("Action: get 1 oak log", "get 1 oak log", "Got 1 oak log", 1.0, True)]
    return trajectory


def test_our_client_summarizes_and_retrieves_through_the_api(memory_url):
    async def scenario() -> tuple[bool, int, str]:
        client = ReMeClient(memory_url, workspace_id="run")
        try:
            inserted = await client.summarize([solved(3, "oak planks")], 1, run_step=2)
            return await client.health(), inserted, await client.retrieve("oak planks", 2)
        finally:
            await client.aclose()

    healthy, inserted, answer = asyncio.run(scenario())
    assert healthy and inserted == 1
    assert "get 1 oak log" in answer


def test_a_failing_server_is_an_error_not_an_empty_answer(memory_url):
    async def scenario() -> None:
        client = ReMeClient(memory_url, retrieve_endpoint="no_such_flow")
        try:
            await client.retrieve("stick", 1)
        finally:
            await client.aclose()

    with pytest.raises(MemoryServiceError, match="HTTP 404"):
        asyncio.run(scenario())


def textcraft_episode(goal: str, action: str) -> list[dict]:
    """As our trainer posts an episode: the fixed instructions and acknowledgement, then the
    task (its goal) and the turns."""
    return [
        {"role": "user", "content": "You are given a few useful crafting recipes to craft items."},
        {"role": "assistant", "content": "OK. I'll follow your instructions and try my best."},
        {"role": "user", "content": f"Crafting commands:\n...\nGoal: craft {goal}."},
        {"role": "assistant", "content": f"Thought: next.\nAction: {action}"},
        {"role": "user", "content": "Got it"},
    ]


def test_our_client_files_experiences_under_the_goal_not_the_instructions(memory_url):
    """Issue 28: every served experience was filed under the fixed instructions, with the
    acknowledgement as its first action, and any goal retrieved the same experience."""
    played = []
    for task_id, goal, action in [
        (1, "acacia planks", "get 1 acacia log"),
        (2, "birch planks", "get 1 birch log"),
    ]:
        trajectory = Trajectory("e", "textcraft", task_id, "g", 0, 0, "m", success=True, reward=1.0)
        trajectory.messages = textcraft_episode(goal, action)
        trajectory.task_info = {"goal": goal}
        trajectory.turns = [Turn(f"Action: {action}", action, "Got it", 1.0, True)]
        played.append(trajectory)

    async def scenario() -> str:
        client = ReMeClient(memory_url, workspace_id="run")
        try:
            assert await client.summarize(played, 2, run_step=1) == 2
            return await client.retrieve("birch planks", 1)
        finally:
            await client.aclose()

    answer = asyncio.run(scenario())
    assert "When to use: Task: birch planks\n" in answer
    assert "completed this task in 1 steps: get 1 birch log" in answer
    assert "acacia" not in answer


def test_a_server_for_an_environment_refuses_tasks_outside_its_training_split(tmp_path):
    app = create_memory_app(
        ExperiencePool(tmp_path / "pool.sqlite"), RuleSummarizer(), train_tasks={"1", "2"}
    )
    unlabelled = {"task_id": "17", "messages": episode("stick", [("craft 4 stick", "Crafted")])}
    with serve_in_thread(app) as url:
        status, answer = post(url, "summary_task_memory", {"trajectories": [unlabelled]})
    assert status == 400
    assert (
        "task 17 is labelled 'train' but is not in the environment's training split"
        in (answer["detail"])
    )


def test_the_served_pool_retrieves_what_the_in_process_pool_does(tmp_path):
    """Issue 28: over `memory.url` retrieval must equal the in-process pool's on the same
    episodes (oracle TextCraft episodes, summarized by the same summarizer, as training does)."""
    demos = tmp_path / "demos.jsonl"
    arguments = ["demos", "--env", "textcraft", "--split", "train", "--tasks", "0-11"]
    result = CliRunner().invoke(app, [*arguments, "--solver", "oracle", "--out", str(demos)])
    assert result.exit_code == 0, result.output
    episodes = list(read_jsonl(demos))
    goals = [str(t.task_info["goal"]) for t in episodes]
    assert len(set(goals)) >= 10
    spec = get_spec("textcraft")
    first_user = len(conversation_start(spec, get_format("react", spec.name), "agenttrain"))

    async def answers(memory: ExperienceService) -> list[str]:
        try:
            assert await memory.summarize(episodes, first_user, run_step=1) > 0
            return [await memory.retrieve(goal, 2) for goal in goals]
        finally:
            await memory.aclose()

    local = LocalMemory(ExperiencePool(tmp_path / "local.sqlite"), RuleSummarizer(), "run")
    in_process = asyncio.run(answers(local))
    served_app = create_memory_app(ExperiencePool(tmp_path / "served.sqlite"), RuleSummarizer())
    with serve_in_thread(served_app) as url:
        served = asyncio.run(answers(ReMeClient(url, workspace_id="run")))
    assert served == in_process
    for goal, answer in zip(goals, served, strict=True):
        assert f"When to use: Task: {goal}\n" in answer.split("\n\n")[0]  # its own task first
