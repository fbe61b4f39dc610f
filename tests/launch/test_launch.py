"""`agenttrain launch` end to end: real `agenttrain serve` and `agenttrain memory serve`
processes on loopback, the launcher as a real process, and a stand-in training command
(`launch.train_command`) that records what it was given and waits to be told to finish."""

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from agenttrain.launcher.state import LaunchState, state_path
from agenttrain.run.tracking import read_metrics
from agenttrain.serving.launch import group_alive
from agenttrain.serving.runner import http_get

HERE = Path(__file__).parent
STAND_IN_TRAINING = [sys.executable, str(HERE / "stand_in_training.py")]
STAND_IN_SERVICE = [sys.executable, str(HERE / "stand_in_service.py"), "--port", "{port}"]
TIMEOUT_S = 180.0
"""Generous: servers start slowly on a loaded 2-core machine. Never reached when it works."""


def wait_for(condition: Callable[[], object], what: str, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


class Launch:
    """One `agenttrain launch` process and its run folder."""

    def __init__(self, tmp_path: Path, config: dict, *overrides: str) -> None:
        self.run_dir = tmp_path / "run"
        config = {"run": {"out_dir": str(self.run_dir)}, **config}
        config["launch"] = {"train_command": STAND_IN_TRAINING, **config.get("launch", {})}
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        self.output = tmp_path / "launch.out"
        with self.output.open("w") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "agenttrain", "launch", str(path), *overrides],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "COLUMNS": "200"},
            )

    def text(self) -> str:
        return self.output.read_text()

    def training(self) -> dict:
        """What the training child recorded, once it runs."""
        record = self.run_dir / "training.json"
        wait_for(lambda: record.exists() or self.process.poll() is not None, "the training")
        assert record.exists(), self.text()
        return json.loads(record.read_text())

    def state(self) -> LaunchState:
        return LaunchState.load(state_path(self.run_dir))

    def exit_code(self) -> int:
        return self.process.wait(TIMEOUT_S)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "agenttrain", "launch", *args, str(self.run_dir)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            env={**os.environ, "COLUMNS": "200"},
        )


@pytest.fixture
def launches(tmp_path: Path) -> Iterator[Callable[..., Launch]]:
    """Start launches; any still running after the test is killed along with its groups."""
    started: list[Launch] = []

    def start(config: dict, *overrides: str) -> Launch:
        started.append(Launch(tmp_path, config, *overrides))
        return started[-1]

    yield start
    for launch in started:
        if launch.process.poll() is None:
            launch.process.kill()
            launch.process.wait()
        if state_path(launch.run_dir).exists():
            for entry in launch.state().processes:
                if group_alive(entry.pgid):
                    os.killpg(entry.pgid, signal.SIGKILL)


def grandchild_pid(log: str) -> int:
    """The pid the stand-in service logged for its sleeping child."""
    lines = [line for line in Path(log).read_text().splitlines() if line.startswith("grandchild")]
    return int(lines[-1].split()[1])


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def nothing_left(launch: Launch, extra_pids: tuple[int, ...] = ()) -> bool:
    groups = [entry.pgid for entry in launch.state().processes]
    return not any(map(group_alive, groups)) and not any(map(pid_alive, extra_pids))


@pytest.mark.slow  # over 9 s on 2 cores: the full suite only
def test_two_textcraft_servers_and_the_memory_service_survive_a_killed_server(launches):
    """Both servers and `agenttrain memory serve` answer, the training gets their URLs; a
    SIGKILLed server comes back on its port; --status shows it; --stop ends everything."""
    launch = launches(
        {
            "memory": {"enabled": True},
            "launch": {
                "servers": {"textcraft": {"count": 2}},
                "memory": {"enabled": True, "port": 0, "args": ["--retrieval", "bm25"]},
                "restart": {"backoff_s": 0},
            },
        }
    )
    arguments = launch.training()["arguments"]
    servers = json.loads(next(a for a in arguments if a.startswith("env.servers="))[12:])
    memory_url = next(a for a in arguments if a.startswith("memory.url="))[11:]
    assert len(servers) == 2
    for url in servers:
        assert json.loads(http_get(f"{url}/health")[1])["env"] == "textcraft"
    assert "experience pool" in http_get(f"{memory_url}/")[1]

    victim = next(e for e in launch.state().processes if e.name == "textcraft-1")
    os.killpg(victim.pgid, signal.SIGKILL)

    def restarted():
        entry = next(e for e in launch.state().processes if e.name == "textcraft-1")
        return entry.restarts == 1 and entry.answers()

    wait_for(restarted, "textcraft-1 to be restarted")
    again = next(e for e in launch.state().processes if e.name == "textcraft-1")
    assert again.url == victim.url and again.pid != victim.pid
    assert "exited with code -9; restarting it on the same port" in launch.text()

    rows = status_rows(launch)
    for name in ("launcher", "textcraft-1", "textcraft-2", "memory", "training"):
        assert rows[name][1] == "yes", rows
    assert rows["textcraft-1"][3:] == ["yes", "1"]  # answers, restarted once

    stopped = launch.cli("--stop")
    assert stopped.returncode == 0, stopped.stderr
    assert "launcher" in stopped.stdout
    assert launch.exit_code() == 128 + signal.SIGTERM  # the training's own status
    assert nothing_left(launch)
    assert all(row[1] == "no" for row in status_rows(launch).values())


def status_rows(launch: Launch) -> dict[str, list[str]]:
    """`--status` as {process: [pid, alive, url, answers, restarts]}."""
    status = launch.cli("--status")
    assert status.returncode == 0, status.stdout + status.stderr
    cells = [line.split() for line in status.stdout.splitlines()]
    return {row[0]: row[1:] for row in cells if len(row) == 6 and row[0] != "process"}


@pytest.mark.slow  # over 9 s on 2 cores: the full suite only
def test_a_dead_server_fails_the_launch_when_restarts_are_off(launches):
    launch = launches({"launch": {"restart": {"enabled": False}}})
    launch.training()
    server = next(e for e in launch.state().processes if e.name == "textcraft-1")
    os.killpg(server.pgid, signal.SIGKILL)
    assert launch.exit_code() == 3
    text = " ".join(launch.text().split())
    assert f"textcraft-1 ({server.url}) exited with code -9 during training" in text
    assert "launch.restart.enabled is false" in text
    assert nothing_left(launch)


def stand_in_launch(launches, **extra) -> Launch:
    """A launch of one stand-in service (with a grandchild) against an external server."""
    return launches(
        {
            "env": {"servers": ["http://127.0.0.1:9"]},
            "memory": {"enabled": True},
            "launch": {
                "memory": {
                    "enabled": True,
                    "port": 0,
                    "command": [*STAND_IN_SERVICE, "--grandchild"],
                    "identity_text": "stand-in",
                },
                **extra,
            },
        }
    )


@pytest.mark.slow  # over 9 s on 2 cores: the full suite only
def test_ctrl_c_stops_the_training_then_every_process_started(launches):
    launch = stand_in_launch(launches)
    training = launch.training()
    grandchild = grandchild_pid(next(e.log for e in launch.state().processes if e.log))
    launch.process.send_signal(signal.SIGINT)
    assert launch.exit_code() == 128 + signal.SIGINT
    assert "SIGINT: stopping the training" in launch.text()
    assert nothing_left(launch, (training["pid"], grandchild))
    assert launch.state().finished


@pytest.mark.slow  # over 9 s on 2 cores: the full suite only
def test_a_sigkilled_launcher_leaves_no_process_behind(launches):
    launch = stand_in_launch(launches)
    training = launch.training()
    grandchild = grandchild_pid(next(e.log for e in launch.state().processes if e.log))
    launch.process.kill()
    launch.process.wait()
    wait_for(lambda: nothing_left(launch, (training["pid"], grandchild)), "the watchdog")
    assert not launch.state().finished
    # the watchdog reports once every group is reaped: on a loaded machine that line comes
    # a moment after the processes are gone
    watchdog_log = launch.run_dir / "launch" / "watchdog.log"
    wait_for(
        lambda: "stopped training, memory" in watchdog_log.read_text(), "the watchdog's report"
    )


@pytest.mark.slow  # over 9 s on 2 cores: the full suite only
def test_the_training_finishing_stops_the_services(launches):
    launch = stand_in_launch(launches)
    launch.training()
    (launch.run_dir / "finish").touch()
    assert launch.exit_code() == 0
    assert "training exited with code 0; stopping the services" in launch.text()
    assert nothing_left(launch)


@pytest.fixture
def occupied_port() -> Iterator[int]:
    """A port held by a plain HTTP server that is none of ours."""

    class Other(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"somebody else's dashboard")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Other)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()


def test_an_occupied_port_is_reported_with_what_answers_there(launches, occupied_port):
    launch = launches({"launch": {"servers": {"textcraft": {"ports": [occupied_port]}}}})
    assert launch.exit_code() == 2
    text = " ".join(launch.text().split())
    assert f"textcraft-1: port {occupied_port} on 127.0.0.1 is already in use" in text
    assert "somebody else's dashboard" in text
    assert not state_path(launch.run_dir).exists()  # nothing was started


def test_a_service_that_is_not_ours_fails_the_identity_check(launches):
    launch = launches(
        {
            "env": {"servers": ["http://127.0.0.1:9"]},
            "memory": {"enabled": True},
            "launch": {"memory": {"enabled": True, "port": 0, "command": STAND_IN_SERVICE}},
        }
    )
    assert launch.exit_code() == 2
    text = " ".join(launch.text().split())
    assert (
        "answers HTTP 200 'stand-in memory service', expected 'agenttrain experience pool'" in text
    )
    assert nothing_left(launch)


@pytest.mark.slow  # over 9 s on 2 cores: the full suite only
def test_a_real_training_runs_against_the_launched_servers(launches, tiny_model_dir):
    """`agenttrain train` itself (tiny model, one GRPO step of Largest Number) as the child."""
    recipe = yaml.safe_load((Path(__file__).parents[2] / "configs/largest_grpo.yaml").read_text())
    launch = launches(
        {k: v for k, v in recipe.items() if k != "run"},
        f"model.path={tiny_model_dir}",
        "data.batch_tasks=2",
        "data.group_size=2",
        "trainer.total_steps=1",
        "trainer.test_freq=0",
        "trainer.loggers=[jsonl]",
        "launch.train_command=[]",
        "launch.servers={largest: {count: 2}}",
    )
    assert launch.exit_code() == 0, launch.text()
    [row] = read_metrics(launch.run_dir / "metrics.jsonl")
    assert row["rollout/env_error_rate"] == 0.0
    urls = [entry.url for entry in launch.state().processes if entry.role == "service"]
    trained_with = yaml.safe_load((launch.run_dir / "config.yaml").read_text())
    assert trained_with["env"]["servers"] == urls and len(urls) == 2
    assert nothing_left(launch)
