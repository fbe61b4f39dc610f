"""`agenttrain eval` when the environment server fails: counted, shown, and a non-zero exit."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import pytest
from typer.testing import CliRunner

from agenttrain.cli import app
from agenttrain.envs import get_spec
from agenttrain.eval.runner import ENV_ERROR_EXIT_CODE
from agenttrain.serving.server import create_app
from support import health, serve_in_thread

runner = CliRunner()
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class FailFirstReset:
    """A real TextCraft server whose first /reset of one task answers an AgentGym error."""

    def __init__(self, task: int) -> None:
        self.app = create_app("textcraft")
        self.task_field = get_spec("textcraft").protocol.task_field
        self.task = task
        self.failed = False

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/reset" or self.failed:
            await self.app(scope, receive, send)
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if json.loads(body).get(self.task_field) == self.task:
            self.failed = True
            answer = json.dumps({"error": "injected failure"}).encode()
            headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": answer})
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


def _eval(out, *args: str):
    return runner.invoke(
        app,
        ["eval", "--model", "oracle", "--max-turns", "40", "--out", str(out), *args],
        env={"COLUMNS": "200"},
    )


@pytest.mark.parametrize(("limit", "exit_code"), [(None, ENV_ERROR_EXIT_CODE), ("0.2", 0)])
def test_an_env_error_is_counted_shown_and_fails_the_run_above_the_limit(
    tmp_path, limit, exit_code
):
    first_task = get_spec("textcraft").split("test")[0]
    limit_args = ["--max-env-error-rate", limit] if limit else []
    with serve_in_thread(FailFirstReset(first_task)) as url:
        result = _eval(tmp_path, "--server", url, "--tasks", "0-3", "-n", "2", *limit_args)

    assert result.exit_code == exit_code, result.output
    output = " ".join(result.output.split())
    assert "errors: oracle: 1 of 8 episodes ended in an environment error" in output
    summary = json.loads((tmp_path / "summary.json").read_text())["oracle"]
    assert summary["env_errors"] == 1 and summary["finish_reasons"]["env_error"] == 1
    assert summary["success_rate"] == 1.0  # the oracle solved every scored episode
    assert summary["success_rate_all"] == pytest.approx(7 / 8)
    assert summary["pass@1"] == 1.0 and summary["pass@2"] == 1.0
    assert summary["tasks_per_metric"] == {"pass@1": 4, "pass@2": 3, "avg@2": 3}
    report = (tmp_path / "report.md").read_text()
    assert "**Errors**" in report and "1.000 (3/4 tasks)" in report
    assert "success (all)" in report and "0.875" in report
    assert "depth None" not in report  # the failed reset's episode has no depth: no bucket
    if exit_code:
        assert "--max-env-error-rate" in output


@pytest.mark.slow  # the client's retries against the dead server take a few seconds
def test_a_server_killed_mid_eval_exits_3_after_writing_every_file(tmp_path, start_textcraft):
    server = start_textcraft()

    def kill_once_sessions_are_open() -> None:
        while health(server.url)["sessions_created"] < 40:
            time.sleep(0.01)
        server.process.kill()

    killer = threading.Thread(target=kill_once_sessions_are_open, daemon=True)
    killer.start()
    result = _eval(tmp_path, "--server", server.url, "--split", "test")
    killer.join(10)

    assert result.exit_code == ENV_ERROR_EXIT_CODE, result.output
    summary = json.loads((tmp_path / "summary.json").read_text())["oracle"]
    errors = summary["env_errors"]
    assert 0 < errors < 100 and summary["finish_reasons"]["env_error"] == errors
    assert summary["success_rate"] == 1.0
    assert summary["success_rate_all"] == pytest.approx((100 - errors) / 100)
    assert f"oracle: {errors} of 100 episodes ended in an environment error" in " ".join(
        result.output.split()
    )
    assert len((tmp_path / "oracle" / "episodes.jsonl").read_text().splitlines()) == 100
    assert (tmp_path / "report.md").exists()
