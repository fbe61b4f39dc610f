"""Training against an environment that fails: said in the progress line, the metrics and the
report, and a step that lost most of its episodes stops the run with a clear error."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import pytest
from typer.testing import CliRunner

from agenttrain.cli import app
from agenttrain.run import checkpoint
from agenttrain.run.tracking import read_metrics
from agenttrain.serving.server import create_app
from rl.tiny_runs import RECIPE
from support import serve_in_thread

Message = MutableMapping[str, Any]


class FailingSteps:
    """A real Largest Number server whose every /step answers an AgentGym error object."""

    def __init__(self) -> None:
        self.app = create_app("largest")

    async def __call__(
        self,
        scope: Message,
        receive: Callable[[], Awaitable[Message]],
        send: Callable[[Message], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http" or scope["path"] != "/step":
            await self.app(scope, receive, send)
            return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": b'{"error": "injected failure"}'})


def train(tiny_model_dir, out, url, *extra: str):
    return CliRunner().invoke(
        app,
        [
            "train",
            str(RECIPE),
            f"model.path={tiny_model_dir}",
            f"run.out_dir={out}",
            f"env.servers=[{url}]",
            "data.batch_tasks=2",
            "data.group_size=4",
            "trainer.total_steps=2",
            "trainer.save_freq=1",
            "trainer.test_freq=0",
            "trainer.loggers=[jsonl]",
            *extra,
        ],
        env={"COLUMNS": "200"},
    )


@pytest.fixture(scope="module")
def failing_server():
    with serve_in_thread(FailingSteps()) as url:
        yield url


def test_a_step_of_env_errors_stops_the_run_with_exit_3_and_no_checkpoint(
    tiny_model_dir, tmp_path, failing_server
):
    result = train(tiny_model_dir, tmp_path, failing_server)
    output = " ".join(result.output.split())
    assert result.exit_code == 3, result.output
    assert "training 1/2 · env errors 8/8 · reward -" in output  # the progress line
    assert "error: step 1: 8 of 8 episodes ended in environment errors" in output
    assert "trainer.max_env_error_rate=0.5" in output and "injected failure" in output
    assert checkpoint.latest(tmp_path) is None and checkpoint.finished(tmp_path) is None
    [row] = read_metrics(tmp_path / "metrics.jsonl")
    assert row["rollout/env_error_rate"] == 1.0 and row["rollout/trained_episodes"] == 0
    report = (tmp_path / "report.md").read_text()
    assert "**Environment errors**: 8 of 8 training episodes (100.0%)" in report


def test_a_higher_limit_lets_the_run_go_on_and_the_report_says_what_was_lost(
    tiny_model_dir, tmp_path, failing_server
):
    result = train(tiny_model_dir, tmp_path, failing_server, "trainer.max_env_error_rate=1")
    assert result.exit_code == 0, result.output
    assert checkpoint.finished(tmp_path) is not None
    report = (tmp_path / "report.md").read_text()
    assert "16 of 16 training episodes (100.0%) ended in an environment error" in report


def test_a_full_disk_while_saving_is_one_error_line_and_leaves_no_half_checkpoint(
    tiny_model_dir, tmp_path, monkeypatch
):
    import errno

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint.torch, "save", full_disk)
    out = tmp_path / "run"
    args = ["train", str(RECIPE), f"model.path={tiny_model_dir}", f"run.out_dir={out}"]
    args += ["data.batch_tasks=2", "data.group_size=2", "trainer.total_steps=1"]
    args += ["trainer.test_freq=0", "trainer.loggers=[jsonl]"]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "300"})
    output = " ".join(result.output.split())
    squeezed = "".join(output.split())  # the console may fold a long path anywhere
    assert result.exit_code == 1, output
    assert f"error:couldnotsavecheckpoint{out}/checkpoints/step-1" in squeezed
    assert "No space left on device" in output and "MiB free there" in output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert list((out / "checkpoints").glob("*")) == []  # nothing half-written
