"""The server speaks AgentGym's TextCraft wire protocol exactly (agentgym.md section 1.1).

Requests are made with `requests`, shaped exactly as AgentGym's TextCraftEnvClient sends
them, against a real `agenttrain serve textcraft` process.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
from collections.abc import Iterator

import orjson
import pytest
import requests

from agenttrain.envs.registry import register
from agenttrain.serving.client import EnvServerPool
from agenttrain.serving.server import MAX_BODY_BYTES, create_app
from support import CounterEnv, SlowCounterEnv, health, serve_in_thread


class AgentGymStyleClient:
    """The HTTP calls of AgentGym's TextCraftEnvClient (agentenv/envs/textcraft.py)."""

    def __init__(self, base: str) -> None:
        self.base = base
        answer = requests.post(
            f"{base}/create",
            json={"minecraft_dir": "agentenv_textcraft/", "commands": None, "goal": None},
            timeout=10,
        )
        assert answer.status_code == 200
        created = answer.json()
        self.env_id = created["id"]
        self.info = {"observation": created["observation"], "reward": 0, "done": False}

    def _post(self, path: str, data: dict) -> dict:
        data["id"] = self.env_id
        answer = requests.post(f"{self.base}/{path}", json=data, timeout=10)
        assert answer.status_code == 200
        return answer.json()

    def _get(self, path: str) -> object:
        answer = requests.get(f"{self.base}/{path}?id={self.env_id}", timeout=10)
        assert answer.status_code == 200
        return answer.json()

    def step(self, model_output: str) -> dict:
        # AgentGym's client-side action extraction for TextCraft.
        found = re.findall(r"Action:\s*(.*?)(?=\n|$)", model_output, re.DOTALL)
        action = found[-1] if found else ""
        action = " ".join(re.sub(r"[^A-Za-z0-9, ]+", "", action).split()).strip()
        return self._post("step", {"action": action})

    def reset(self, idx: int) -> dict:
        return self._post("reset", {"data_idx": idx})

    def close(self) -> object:
        return self._post("close", {})


def test_root_is_the_agentgym_identity_string(textcraft_url):
    answer = requests.get(f"{textcraft_url}/", timeout=5)
    assert answer.status_code == 200
    assert answer.content == b'"This is environment TextCraft."'
    assert answer.headers["content-type"].startswith("application/json")


def test_create_answers_with_the_first_state_like_agentgym(textcraft_url):
    client = AgentGymStyleClient(textcraft_url)
    answer = requests.get(f"{textcraft_url}/detail?id={client.env_id}", timeout=5).json()
    assert isinstance(client.env_id, int)
    assert client.info["observation"].startswith("Crafting commands:\n")
    assert answer == {
        "observation": client.info["observation"],
        "done": False,
        "reward": 0,
        "deleted": False,
    }
    assert client.close() is True


def test_an_unmodified_agentgym_client_plays_a_full_episode(textcraft_url):
    client = AgentGymStyleClient(textcraft_url)
    reset = client.reset(12)
    assert set(reset) == {"id", "observation", "done", "reward"}
    assert reset["id"] == client.env_id and reset["done"] is False and reset["reward"] == 0
    assert reset["observation"].endswith("Goal: craft bread.")

    got = client.step("Thought:\nI need wheat.\n\nAction:\nget 3 wheat")
    assert got == {"observation": "Got 3 wheat", "reward": 0, "done": False}
    crafted = client.step("Thought: Now bread.\n\nAction: craft 1 bread using 3 wheat")
    assert crafted == {"observation": "Crafted 1 minecraft:bread", "reward": 1, "done": True}
    assert client._get("observation") == "Crafted 1 minecraft:bread"
    assert client._get("detail") == {
        "observation": "Crafted 1 minecraft:bread",
        "done": True,
        "reward": 1,
        "deleted": False,
    }
    assert client.close() is True
    assert client.close() is False  # AgentGym: a second close answers false


def test_rewards_are_integers_on_the_wire(textcraft_url):
    client = AgentGymStyleClient(textcraft_url)
    client.reset(12)
    client.step("Action: get 3 wheat")
    raw = requests.post(
        f"{textcraft_url}/step",
        json={"id": client.env_id, "action": "craft 1 bread using 3 wheat"},
        timeout=5,
    ).text
    assert '"reward":1,' in raw and '"reward":1.0' not in raw
    client.close()


def test_request_errors_are_http_200_error_objects(textcraft_url):
    def post(path: str, body: dict) -> requests.Response:
        return requests.post(f"{textcraft_url}/{path}", json=body, timeout=5)

    unknown = 10**9
    for answer in (
        post("step", {"id": unknown, "action": "inventory"}),
        post("reset", {"id": unknown, "data_idx": 0}),
        requests.get(f"{textcraft_url}/observation?id={unknown}", timeout=5),
        requests.get(f"{textcraft_url}/detail?id={unknown}", timeout=5),
    ):
        assert answer.status_code == 200
        assert answer.json() == {"error": f"The id {unknown} is not valid."}

    client = AgentGymStyleClient(textcraft_url)
    client.close()
    answer = post("step", {"id": client.env_id, "action": "inventory"})
    assert answer.json() == {
        "error": f"The task with environment {client.env_id} has been deleted."
    }


@pytest.mark.parametrize("never_issued", [10**9, -1])
def test_closing_a_never_issued_id_answers_false_like_agentgym(textcraft_url, never_issued):
    # AgentGym's close catches the failed lookup and answers false, whatever the id.
    answer = requests.post(f"{textcraft_url}/close", json={"id": never_issued}, timeout=5)
    assert answer.status_code == 200
    assert answer.content == b"false"


def _chunks(payload: bytes, size: int = 1 << 16) -> Iterator[bytes]:
    """A body sent with chunked transfer encoding (no Content-Length)."""
    for start in range(0, len(payload), size):
        yield payload[start : start + size]


@pytest.mark.parametrize("transfer", ["content-length", "chunked"])
def test_an_oversized_body_gets_a_json_413(textcraft_url, transfer):
    payload = b'{"id": 0, "action": "' + b"x" * (MAX_BODY_BYTES + 1) + b'"}'
    answer = requests.post(
        f"{textcraft_url}/step",
        data=payload if transfer == "content-length" else _chunks(payload),
        headers={"Content-Type": "application/json"},
        timeout=10,
    )
    assert answer.status_code == 413
    assert answer.headers["content-type"] == "application/json"
    assert answer.json() == {"error": f"request body larger than {MAX_BODY_BYTES} bytes"}


def test_a_chunked_body_under_the_limit_is_served(textcraft_url):
    client = AgentGymStyleClient(textcraft_url)
    body = orjson.dumps({"id": client.env_id, "data_idx": 12})
    answer = requests.post(
        f"{textcraft_url}/reset",
        data=_chunks(body, size=7),
        headers={"Content-Type": "application/json"},
        timeout=5,
    )
    assert answer.json()["observation"].endswith("Goal: craft bread.")
    client.close()


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("step", b"{not json"),
        ("step", b'{"id": 0}'),
        ("step", b'{"id": "zero", "action": "inventory"}'),
        ("reset", b'{"id": 0, "data_idx": "first"}'),
        ("close", b"[]"),
    ],
)
def test_malformed_requests_get_422_not_500(textcraft_url, path, body):
    answer = requests.post(
        f"{textcraft_url}/{path}",
        data=body,
        headers={"Content-Type": "application/json"},
        timeout=5,
    )
    assert answer.status_code == 422
    assert "detail" in answer.json()


def test_health_counts_sessions(textcraft_url):
    before = health(textcraft_url)
    client = AgentGymStyleClient(textcraft_url)
    during = health(textcraft_url)
    client.close()
    after = health(textcraft_url)
    assert before["env"] == "textcraft" and before["status"] == "ok"
    assert during["sessions"] == before["sessions"] + 1
    assert after["sessions"] == before["sessions"]
    assert after["sessions_closed"] == before["sessions_closed"] + 1


def test_bearer_token_is_required_when_set(start_textcraft):
    url = start_textcraft("--token", "s3cret").url
    refused = requests.post(f"{url}/create", json={}, timeout=5)
    assert refused.status_code == 401
    assert "bearer token" in refused.json()["error"]
    wrong = requests.post(
        f"{url}/create", json={}, headers={"Authorization": "Bearer nope"}, timeout=5
    )
    assert wrong.status_code == 401
    allowed = requests.post(
        f"{url}/create", json={}, headers={"Authorization": "Bearer s3cret"}, timeout=5
    )
    assert allowed.status_code == 200 and "id" in allowed.json()
    assert requests.get(f"{url}/health", timeout=5).status_code == 200


def test_session_cap_refuses_clearly_and_recovers(start_textcraft):
    url = start_textcraft("--max-sessions", "2").url
    first = requests.post(f"{url}/create", json={}, timeout=5).json()["id"]
    requests.post(f"{url}/create", json={}, timeout=5)
    refused = requests.post(f"{url}/create", json={}, timeout=5)
    assert refused.status_code == 503
    assert refused.headers["Retry-After"] == "1"
    assert "session cap reached: 2 of 2" in refused.json()["error"]
    assert requests.post(f"{url}/close", json={"id": first}, timeout=5).json() is True
    assert requests.post(f"{url}/create", json={}, timeout=5).status_code == 200


def test_idle_sessions_are_closed_after_the_ttl(start_textcraft):
    url = start_textcraft("--session-ttl", "1").url
    session = requests.post(f"{url}/create", json={}, timeout=5).json()["id"]
    deadline = time.monotonic() + 10
    while health(url)["sessions"] and time.monotonic() < deadline:
        time.sleep(0.1)
    report = health(url)
    assert report["sessions"] == 0 and report["sessions_expired"] == 1
    answer = requests.post(f"{url}/step", json={"id": session, "action": "inventory"}, timeout=5)
    assert answer.json() == {"error": f"The task with environment {session} has been deleted."}


def test_a_taken_port_is_a_clear_error_naming_what_holds_it(textcraft_url):
    port = textcraft_url.rsplit(":", 1)[1]
    result = subprocess.run(
        [sys.executable, "-m", "agenttrain", "serve", "textcraft", "--port", port],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    message = " ".join((result.stdout + result.stderr).split())
    assert f"port {port} on 127.0.0.1 is already in use" in message
    assert "This is environment TextCraft." in message


def test_any_registered_environment_can_be_served_and_crashes_are_errors_not_500():
    register("counter-test", CounterEnv, replace=True)
    with serve_in_thread(create_app("counter-test")) as url:
        assert requests.get(url, timeout=5).json() == "This is environment Counter."
        created = requests.post(f"{url}/create", timeout=5).json()
        assert created == {"id": 0}  # only TextCraft's create returns a first state
        reset = requests.post(f"{url}/reset", json={"id": 0, "data_idx": 2}, timeout=5)
        assert reset.json()["observation"] == "count to 2"
        crash = requests.post(f"{url}/step", json={"id": 0, "action": "crash"}, timeout=5)
        assert crash.status_code == 200
        assert crash.json() == {"error": "RuntimeError: boom"}
        step = requests.post(f"{url}/step", json={"id": 0, "action": "+1"}, timeout=5).json()
        assert step == {"observation": "1", "reward": 0, "done": False}
        step = requests.post(f"{url}/step", json={"id": 0, "action": "+1"}, timeout=5).json()
        assert step == {"observation": "2", "reward": 0.5, "done": True}


async def test_requests_to_one_session_run_one_at_a_time_even_in_worker_threads():
    register("slow-counter-test", SlowCounterEnv, replace=True)
    with serve_in_thread(create_app("slow-counter-test")) as url:
        async with EnvServerPool("slow-counter-test", url) as pool:
            first, second = pool.environment(), pool.environment()
            await asyncio.gather(first.reset(100), second.reset(100))
            results = await asyncio.gather(
                *(env.step("+1") for env in (first, second) for _ in range(5))
            )
    counts = sorted(int(r.observation) for r in results)
    assert counts == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5]  # no lost update within a session


def test_an_action_that_is_not_valid_utf8_does_not_poison_the_session(textcraft_url):
    created = requests.post(f"{textcraft_url}/create", json={}, timeout=10).json()
    session = created["id"]
    # A JSON escape of a lone surrogate decodes to a str that has no UTF-8 encoding.
    raw = '{"id": ' + str(session) + ', "action": "get \\ud800 planks"}'
    step = requests.post(
        f"{textcraft_url}/step",
        data=raw,
        headers={"content-type": "application/json"},
        timeout=10,
    ).json()
    assert "error" not in step
    assert "\ufffd" in step["observation"]
    for path in ("observation", "detail"):
        later = requests.get(f"{textcraft_url}/{path}?id={session}", timeout=10).json()
        assert "error" not in later
    step = requests.post(
        f"{textcraft_url}/step", json={"id": session, "action": "inventory"}, timeout=10
    ).json()
    assert step["observation"].startswith("Inventory")


@pytest.mark.parametrize(
    ("env", "action"), [("sqlgym", "SELECT 1"), ("searchqa", "<answer>nobody</answer>")]
)
def test_sqlgym_and_searchqa_rewards_are_json_floats_as_agentgym_sends_them(env, action):
    from agenttrain.envs import get_spec

    proto = get_spec(env).protocol
    with serve_in_thread(create_app(env)) as url:
        created = requests.post(f"{url}/create", json={}, timeout=10).json()
        body = {proto.id_field: created, proto.task_field: 0}
        requests.post(f"{url}/reset", json=body, timeout=10).raise_for_status()
        answer = requests.post(
            f"{url}/step", json={proto.id_field: created, "action": action}, timeout=10
        )
    assert re.search(rb'"reward":0\.0[,}]', answer.content), answer.content


@pytest.mark.parametrize(("env", "field"), [("babyai", "data_idx"), ("searchqa", "id")])
def test_a_reset_without_its_task_is_refused_with_422_like_agentgym(env, field):
    from agenttrain.envs import get_spec

    proto = get_spec(env).protocol
    with serve_in_thread(create_app(env)) as url:
        created = requests.post(f"{url}/create", json={}, timeout=10).json()
        session = created if isinstance(created, int) else created[proto.id_field]
        answer = requests.post(f"{url}/reset", json={proto.id_field: session}, timeout=10)
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"] == ["body", field]
    assert answer.json()["detail"][0]["msg"] == "Field required"
