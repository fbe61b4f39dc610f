"""Helpers shared by tests: a uvicorn server in a thread, /health, a tiny environment."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
import time
import urllib.request
from collections.abc import Iterator

import uvicorn

from agenttrain.envs import EnvSpec, LocalEnvironment, Observation, StepResult, WireProtocol
from agenttrain.serving.runner import bind


@contextlib.contextmanager
def serve_in_thread(app: object) -> Iterator[str]:
    """Serve an ASGI app with uvicorn on a free loopback port in a background thread."""
    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="error", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def health(url: str) -> dict:
    with urllib.request.urlopen(f"{url}/health", timeout=5) as response:
        return json.loads(response.read())


class CounterEnv(LocalEnvironment):
    """A tiny environment for serving tests: count up to the task id; "crash" raises."""

    spec = EnvSpec(
        name="counter-test",
        display_name="Counter",
        description="test environment",
        conversation_start=(),
        agentgym_conversation_start=(),
        default_max_turns=5,
        action_format="raw",
        protocol=WireProtocol(root_text="This is environment Counter."),
        split_loader=lambda: {"test": [1, 2]},
    )

    def reset_sync(self, task_id: int) -> Observation:
        self.target, self.count = task_id, 0
        return Observation(f"count to {task_id}")

    def step_sync(self, action: str) -> StepResult:
        if action == "crash":
            raise RuntimeError("boom")
        self.count += 1
        done = self.count >= self.target
        return StepResult(str(self.count), 0.5 if done else 0.0, done)


class SlowCounterEnv(CounterEnv):
    """A blocking environment whose step reads, sleeps, then writes: unsafe if run twice at once."""

    spec = dataclasses.replace(CounterEnv.spec, name="slow-counter-test")
    blocking = True

    def step_sync(self, action: str) -> StepResult:
        seen = self.count
        time.sleep(0.02)
        self.count = seen + 1
        return StepResult(str(self.count), 0.0, False)


class Trickle:
    """A request stream whose request i becomes available at the decoder's (i + 1)-th look,
    so later rows join while earlier ones are still decoding (continuous batching)."""

    def __init__(self, requests):
        self.waiting = list(enumerate(requests))
        self.looks = 0
        self.done = {}

    def take(self, limit, idle=False):
        self.looks += 1
        ready = [item for item in self.waiting if item[0] < self.looks][:limit]
        self.waiting = [item for item in self.waiting if item not in ready]
        return [(request, index) for index, request in ready]

    def deliver(self, handle, generation):
        assert handle not in self.done, "delivered twice"
        self.done[handle] = generation
