"""The verl <= 0.7 interaction, checked against verl 0.7.1's own `BaseInteraction` and
interaction registry (read from the verl 0.7.1 wheel that `make test` downloads, since verl
0.8 removed them): it loads from verl's YAML, plays an episode the way verl 0.7's
ToolAgentLoop drives it, and always closes its sessions."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import json
import math
import sys
import types
import urllib.request
import zipfile
from pathlib import Path

import pytest

from agenttrain.agent.experts import OracleExpert
from agenttrain.agent.formats import get_format
from agenttrain.envs.largest import SPEC as LARGEST
from agenttrain.envs.largest import LargestEnv
from agenttrain.envs.registry import register
from agenttrain.integrations.verl import interaction as interaction_module
from agenttrain.integrations.verl import workers
from agenttrain.policy.base import ChatMessage

WHEELS = Path(sys.prefix) / "wheels"


def verl07_module(path: str, name: str) -> types.ModuleType:
    """A module of the verl 0.7.1 wheel, loaded from the wheel under its own name."""
    wheels = sorted(WHEELS.glob("verl-0.7.1-*.whl"))
    assert wheels, f"no verl 0.7.1 wheel in {WHEELS}: run `make test` (it downloads it)"
    module = types.ModuleType(name)
    module.__file__ = f"verl-0.7.1/{path}"
    source = zipfile.ZipFile(wheels[0]).read(path).decode()
    exec(compile(source, f"verl-0.7.1/{path}", "exec"), module.__dict__)
    return module


@pytest.fixture
def verl07(monkeypatch):
    """verl 0.7.1's interactions package in place of the installed verl's (which has none),
    with our interaction module re-imported on top of it."""
    base = verl07_module("verl/interactions/base.py", "verl.interactions.base")
    package = types.ModuleType("verl.interactions")
    package.base = base
    monkeypatch.setitem(sys.modules, "verl.interactions", package)
    monkeypatch.setitem(sys.modules, "verl.interactions.base", base)
    importlib.reload(interaction_module)
    yield base
    monkeypatch.undo()
    importlib.reload(interaction_module)


def oracle_reply(messages: list[dict]) -> str:
    oracle = OracleExpert("textcraft", get_format("react", "textcraft"))
    conversation = [ChatMessage(m["role"], m["content"]) for m in messages if m["role"] != "system"]
    step = oracle.next_step(conversation)
    return oracle.format.render(step.thought, step.action)


async def tool_agent_loop_07(interaction, request_id: str, kwargs: dict, first: str) -> list:
    """What verl 0.7.1's ToolAgentLoop does with an interaction, minus the model: start, then
    per reply generate_response until it says terminate (the oracle plays the model)."""
    await interaction.start_interaction(request_id, **kwargs)
    messages = [{"role": "user", "content": first}]
    scores = []
    while True:
        messages.append({"role": "assistant", "content": oracle_reply(messages)})
        done, observation, score, _ = await interaction.generate_response(
            request_id, messages, **kwargs
        )
        scores.append(score)
        messages.append({"role": "user", "content": observation})
        if done:
            return scores


def first_observation(task_id: int) -> str:
    from agenttrain.envs import make_env

    async def reset():
        env = make_env("textcraft")
        return (await env.reset(task_id)).text

    return asyncio.run(reset())


def test_verl_07_loads_it_from_its_yaml_and_it_is_a_base_interaction(verl07, tmp_path):
    base = verl07
    registry = verl07_module(
        "verl/interactions/utils/interaction_registry.py", "verl07_interaction_registry"
    )
    config = tmp_path / "interaction.yaml"
    config.write_text(
        "interaction:\n"
        "  - name: agenttrain\n"
        "    class_name: agenttrain.integrations.verl.interaction.AgentTrainInteraction\n"
        "    config: {max_turns: 30}\n"
    )
    loaded = registry.initialize_interactions_from_config(str(config))["agenttrain"]
    assert isinstance(loaded, base.BaseInteraction)
    assert loaded.name == "agenttrain" and loaded.settings.max_turns == 30

    first = first_observation(12)

    async def episode():
        try:
            kwargs = {"name": "agenttrain", "env": "textcraft", "task_id": 12}
            scores = await tool_agent_loop_07(loaded, "r1", kwargs, first)
            # verl 0.7's base class declares these without an instance id: both forms work
            return scores, await loaded.calculate_score(), await loaded.calculate_score("r1")
        finally:
            await loaded.finalize_interaction()
            await workers.close_sources()

    scores, score, by_id = asyncio.run(episode())
    assert scores[-1] == 1.0 and score == by_id == 1.0
    assert loaded.sessions == {}


class CountingLargest(LargestEnv):
    """Largest Number that counts open instances; task 13 crashes on step."""

    spec = dataclasses.replace(LARGEST, name="counting-largest-verl")
    open = 0

    def reset_sync(self, task_id):
        CountingLargest.open += 1
        self.task = task_id
        return super().reset_sync(task_id)

    def step_sync(self, action):
        if self.task == 13:
            raise RuntimeError("simulator crashed")
        return super().step_sync(action)

    def close_sync(self):
        CountingLargest.open -= 1


def test_sessions_are_always_closed(tmp_path):
    register("counting-largest-verl", CountingLargest, replace=True)
    CountingLargest.open = 0
    interaction = interaction_module.AgentTrainInteraction({"session_ttl_s": 0.05})
    kwargs = {"name": "agenttrain", "env": "counting-largest-verl"}
    answer = [{"role": "assistant", "content": "Action: 7"}]

    async def run():
        try:
            # 1. an episode that ends: closed by generate_response
            await interaction.start_interaction("done", task_id=3, **kwargs)
            done, *_ = await interaction.generate_response("done", answer, task_id=3, **kwargs)
            assert done and CountingLargest.open == 0
            # 2. an env error: reported, not scored (NaN turn score: the reward function's
            #    sign of an error, since turn scores are all verl 0.7 hands it), closed
            await interaction.start_interaction("crash", task_id=13, **kwargs)
            done, _, score, extra = await interaction.generate_response(
                "crash", answer, task_id=13, **kwargs
            )
            assert done and math.isnan(score) and extra["env_error"] == 1
            assert "simulator crashed" in extra["env_error_message"]
            assert await interaction.calculate_score("crash") == 0.0
            assert CountingLargest.open == 0
            # 3. abandoned mid-episode (verl 0.7 never finalizes): closed once idle
            await interaction.start_interaction("abandoned", task_id=4, **kwargs)
            assert CountingLargest.open == 1
            await asyncio.sleep(0.1)
            await interaction.start_interaction("next", task_id=5, **kwargs)
            assert "abandoned" not in interaction.sessions and CountingLargest.open == 1
            # 4. finalize without an id (verl 0.7's base signature) closes the rest
            await interaction.finalize_interaction()
            assert CountingLargest.open == 0 and interaction.sessions == {}
        finally:
            await workers.close_sources()

    asyncio.run(run())


def test_an_episode_over_a_server_leaves_no_session_open(textcraft_url):
    interaction = interaction_module.AgentTrainInteraction(
        {"servers": {"textcraft": [textcraft_url]}}
    )

    def open_sessions() -> int:
        with urllib.request.urlopen(f"{textcraft_url}/health", timeout=5) as response:
            return json.loads(response.read())["sessions"]

    before = open_sessions()
    first = first_observation(140)

    async def run():
        try:
            kwargs = {"name": "agenttrain", "env": "textcraft", "task_id": 140}
            return await tool_agent_loop_07(interaction, "r", kwargs, first)
        finally:
            await workers.close_sources()

    assert asyncio.run(run())[-1] == 1.0
    assert open_sessions() == before


def test_sessions_abandoned_under_other_interaction_objects_are_closed_too():
    """verl 0.7.1 builds an interaction object per trajectory: the sessions of episodes cut
    by response_length belong to objects nobody calls again (issue 23: 4 opened, 0 closed)."""
    register("counting-largest-verl", CountingLargest, replace=True)
    CountingLargest.open = 0
    kwargs = {"name": "agenttrain", "env": "counting-largest-verl"}
    config = {"session_ttl_s": 0.5}  # not shorter: on a busy machine 4 starts take > 0.05 s

    async def run():
        try:
            for index in range(4):  # four trajectories, each cut before the episode ended
                cut = interaction_module.AgentTrainInteraction(dict(config))
                await cut.start_interaction(f"cut-{index}", task_id=index, **kwargs)
            assert CountingLargest.open == 4
            await asyncio.sleep(0.7)
            later = interaction_module.AgentTrainInteraction(dict(config))
            await later.start_interaction("later", task_id=9, **kwargs)
            assert CountingLargest.open == 1  # only the new trajectory's session is open
            await later.finalize_interaction()
            assert CountingLargest.open == 0
        finally:
            await workers.close_sources()

    asyncio.run(run())
