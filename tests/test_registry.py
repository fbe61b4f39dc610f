"""The environment registry: names, in-process availability, and plug-ins."""

from __future__ import annotations

import dataclasses

import pytest
import requests

from agenttrain.envs import (
    DuplicateEnvironment,
    EnvKwargsError,
    LocalEnvironment,
    NotInProcess,
    Observation,
    StepResult,
    UnknownEnvironment,
    get_spec,
    make_env,
    register,
    registrations,
)
from agenttrain.envs.agentgym import REMOTE_SPECS
from agenttrain.serving.server import create_app
from support import CounterEnv, serve_in_thread


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
    register("counter-test", CounterEnv, replace=True)
    assert get_spec("counter-test").display_name == "Counter"
    assert isinstance(make_env("counter-test"), CounterEnv)


class StrideEnv(LocalEnvironment):
    """Counts in steps of `stride` up to `limit`: an environment with constructor kwargs."""

    spec = dataclasses.replace(CounterEnv.spec, name="stride-test")

    def __init__(self, stride: int = 1, *, limit: int = 10) -> None:
        super().__init__()
        self.stride, self.limit = stride, limit

    def reset_sync(self, task_id: int) -> Observation:
        return Observation(f"stride {self.stride}, limit {self.limit}")

    def step_sync(self, action: str) -> StepResult:
        return StepResult("", 0.0, True)


def test_make_env_builds_with_the_registered_defaults_updated_by_overrides():
    register("stride-test", StrideEnv, replace=True, stride=2)
    default = make_env("stride-test")
    assert (default.stride, default.limit) == (2, 10)
    custom = make_env("stride-test", limit=4)
    assert (custom.stride, custom.limit) == (2, 4)
    assert make_env("stride-test", stride=3).stride == 3


def test_bad_kwargs_name_the_environment_and_the_accepted_parameters():
    register("stride-test", StrideEnv, replace=True)
    with pytest.raises(
        EnvKwargsError, match=r"'stride-test' takes no parameter 'strde'.*stride, limit"
    ):
        make_env("stride-test", strde=2)
    with pytest.raises(EnvKwargsError, match="'stride-test' takes no parameter 'size'"):
        register("stride-test", StrideEnv, replace=True, size=3)
    with pytest.raises(EnvKwargsError, match="accepted parameters: none"):
        make_env("counter-test", stride=2)


def test_a_second_registration_of_a_name_is_an_error_unless_replacing():
    register("stride-test", StrideEnv, replace=True, stride=2)
    with pytest.raises(
        DuplicateEnvironment, match=r"'stride-test' is already registered.*replace=True"
    ):
        register("stride-test", StrideEnv, stride=5)
    assert make_env("stride-test").stride == 2
    with pytest.raises(DuplicateEnvironment, match="'TextCraft' is already registered"):
        register("TextCraft", StrideEnv, spec=get_spec("textcraft"))
    register("stride-test", StrideEnv, replace=True, stride=5)
    assert make_env("stride-test").stride == 5


def test_a_factory_function_registers_with_an_explicit_spec():
    def build(stride: int = 1) -> StrideEnv:
        return StrideEnv(stride, limit=stride * 10)

    register("stride-test", build, spec=StrideEnv.spec, replace=True, stride=3)
    assert make_env("stride-test").limit == 30
    with pytest.raises(TypeError, match="needs an EnvSpec"):
        register("no-spec-test", build)


def test_the_name_must_be_the_spec_name():
    with pytest.raises(ValueError, match="spec named 'stride-test'"):
        register("other-test", StrideEnv)
    with pytest.raises(TypeError, match="name first"):
        register(StrideEnv.spec, StrideEnv)


def test_server_only_environments_refuse_kwargs_as_not_in_process():
    with pytest.raises(NotInProcess):
        make_env("webshop", num_products=1000)


def test_a_served_environment_is_built_with_its_registered_defaults():
    register("stride-test", StrideEnv, replace=True, stride=4)
    with serve_in_thread(create_app("stride-test")) as url:
        requests.post(f"{url}/create", timeout=5).raise_for_status()
        reset = requests.post(f"{url}/reset", json={"id": 0, "data_idx": 1}, timeout=5).json()
        assert reset["observation"] == "stride 4, limit 10"


def run_python(code: str) -> str:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_asking_for_one_environment_imports_only_its_package():
    """Issue 25: the registry imported every environment (minigrid, pygame, ...) on first use."""
    loaded = run_python(
        "import sys, agenttrain.envs as e; e.get_spec('textcraft'); "
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'minigrid', 'gymnasium', 'pygame', 'scienceworld', 'numpy'}), "
        "sorted(m for m in sys.modules if m.startswith('agenttrain.envs.') and m.count('.') == 2))"
    )
    assert loaded.startswith("[] ")
    assert "agenttrain.envs.textcraft" in loaded and "agenttrain.envs.babyai" not in loaded


def test_a_missing_dependency_of_one_environment_affects_only_that_one():
    shown = run_python(
        "import sys; sys.modules['minigrid'] = None  # as if minigrid were not installed\n"
        "import agenttrain.envs as e\n"
        "print(e.get_spec('textcraft').name)\n"
        "try:\n    e.get_spec('babyai')\nexcept e.EnvUnavailable as missing:\n    print(missing)\n"
        "print(sorted(r.spec.name for r in e.registrations()))"
    )
    name, problem, listed = shown.splitlines()
    assert name == "textcraft"
    assert "environment 'babyai' could not be loaded from agenttrain.envs.babyai:BabyAIEnv" in (
        problem
    )
    assert "minigrid" in problem
    assert "babyai" not in listed and "textcraft" in listed and "sciworld" in listed
