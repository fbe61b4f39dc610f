"""The environment registry: names, in-process availability, and plug-ins."""

from __future__ import annotations

import pytest

from agenttrain.envs import (
    NotInProcess,
    UnknownEnvironment,
    get_spec,
    make_env,
    register,
    registrations,
)
from agenttrain.envs.agentgym import REMOTE_SPECS
from support import CounterEnv


def test_every_agentgym_environment_is_known_with_its_wire_dialect():
    names = {r.spec.name for r in registrations()}
    assert {"textcraft", "babyai", "sciworld", "alfworld", "webshop", "sqlgym", "searchqa"} <= names
    assert get_spec("webshop").protocol.id_field == "env_idx"
    assert get_spec("webshop").protocol.task_field == "session_id"
    assert get_spec("alfworld").protocol.task_field == "game"
    assert get_spec("sqlgym").protocol.task_field == "item_id"
    assert get_spec("TextCraft").protocol.root_text == "This is environment TextCraft."


def test_unknown_names_suggest_the_closest_environment():
    with pytest.raises(UnknownEnvironment, match=r"did you mean 'sciworld'\?.*known: "):
        get_spec("sciwrld")


def test_server_only_environments_say_how_to_use_them():
    with pytest.raises(NotInProcess, match="--server URL"):
        make_env("webshop")


def test_published_agentgym_splits_are_exposed():
    assert get_spec("alfworld").split("test") == tuple(range(2420, 2620))
    with pytest.raises(KeyError, match="splits: train, test"):
        get_spec("alfworld").split("val")
    assert all(spec.num_tasks is None or spec.num_tasks > 0 for spec in REMOTE_SPECS)


def test_a_registered_plugin_environment_becomes_available():
    register(CounterEnv.spec, CounterEnv)
    assert get_spec("counter-test").display_name == "Counter"
    assert isinstance(make_env("counter-test"), CounterEnv)
