"""Run a launch: start the services (each its own process group, logs in the run folder),
check they are healthy and ours, run the training, restart or fail on a service's death, and
stop every process started, and nothing else, however the launch ends."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from agenttrain.config import load
from agenttrain.launcher.services import ServiceSpec, plan_services, server_overrides
from agenttrain.launcher.state import (
    LAUNCH_DIR,
    LaunchState,
    ProcessRecord,
    process_created,
    state_path,
)
from agenttrain.rl.config import TrainConfig
from agenttrain.serving.launch import (
    ServerStartError,
    spawn_group,
    stop_group,
    wait_until_healthy,
)
from agenttrain.serving.runner import http_get

HURRIED_STOP_S = 2.0
"""After a second Ctrl-C, how long each process group gets before SIGKILL."""


class LaunchFailed(RuntimeError):
    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class Interrupted(BaseException):
    """A signal that ends the launch at once (before the training runs, or a second one)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.exit_code = 128 + signum


@dataclass
class RunningService:
    spec: ServiceSpec
    process: subprocess.Popen[bytes]
    log_path: Path
    restarts: int = 0


class Launcher:
    def __init__(
        self,
        config_path: Path,
        overrides: Sequence[str],
        report: Callable[[str], None] = print,
    ) -> None:
        """Validate everything and choose the ports; nothing is started yet."""
        self.config = load(TrainConfig, config_path, overrides)
        self.specs = plan_services(self.config)
        self.train_overrides = [*overrides, *server_overrides(self.config, self.specs)]
        load(TrainConfig, config_path, self.train_overrides)  # what the training will read
        base = self.config.launch.train_command or [sys.executable, "-m", "agenttrain", "train"]
        self.train_command = [*base, str(config_path), *self.train_overrides]
        self.dir = self.config.run.out_dir / LAUNCH_DIR
        self.report = report
        self.children: list[subprocess.Popen[bytes]] = []
        self.services: list[RunningService] = []
        self.training: subprocess.Popen[bytes] | None = None
        self.stopping: int | None = None
        self.state = LaunchState(os.getpid(), process_created(os.getpid()))

    def run(self) -> int:
        """The training's exit status, 3 if a service failed it, 128+N if signal N ended it."""
        self._save()
        watchdog, watch_pipe = self._start_watchdog()
        handlers = {
            sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)
        }
        hurried = False
        try:
            for spec in self.specs:
                self.services.append(self._start(spec))
            self._start_training()
            code = self._supervise()
            self.report(f"training exited with code {code}; stopping the services")
            return code
        except Interrupted as stop:
            hurried = True
            self.report(f"{stop}: stopping everything now")
            return stop.exit_code
        finally:
            self._stop_everything(HURRIED_STOP_S if hurried else None)
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
            os.close(watch_pipe)
            with contextlib.suppress(subprocess.TimeoutExpired):
                watchdog.wait(10)

    def _save(self) -> None:
        self.state.save(state_path(self.config.run.out_dir))

    def _start_watchdog(self) -> tuple[subprocess.Popen[bytes], int]:
        """The watchdog stops the recorded groups if this process dies without doing it."""
        read_end, write_end = os.pipe()
        with (self.dir / "watchdog.log").open("ab") as log:
            watchdog = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "agenttrain.launcher.watchdog",
                    str(state_path(self.config.run.out_dir)),
                    str(self.config.launch.stop_timeout_s),
                ],
                stdin=read_end,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        os.close(read_end)
        return watchdog, write_end

    def _start(self, spec: ServiceSpec, restarts: int = 0) -> RunningService:
        log_path = self.dir / "logs" / f"{spec.name}.log"
        process = spawn_group(spec.command, log_path)
        self.children.append(process)
        self.state.record(
            ProcessRecord(
                spec.name,
                "service",
                list(spec.command),
                process.pid,
                process_created(process.pid),
                spec.url,
                spec.health_route,
                str(log_path),
                restarts,
            )
        )
        self._save()
        timeout_s = self.config.launch.ready_timeout_s
        try:
            wait_until_healthy(f"{spec.url}{spec.health_route}", process, timeout_s, log_path)
        except ServerStartError as failure:
            raise LaunchFailed(f"{spec.name} did not start: {failure}", 2) from None
        self._check_identity(spec)
        self.report(f"{spec.name}: {spec.url} (pid {process.pid}, log {log_path})")
        return RunningService(spec, process, log_path, restarts)

    def _check_identity(self, spec: ServiceSpec) -> None:
        if spec.identity_route is None or spec.identity_text is None:
            return
        try:
            status, body = http_get(f"{spec.url}{spec.identity_route}")
        except OSError as failure:
            status, body = 0, f"no answer ({type(failure).__name__})"
        if status != 200 or spec.identity_text not in body:
            raise LaunchFailed(
                f"{spec.name}: GET {spec.url}{spec.identity_route} answers HTTP {status} "
                f"{body[:120]!r}, expected {spec.identity_text!r}: another program answers "
                f"on port {spec.port}",
                2,
            )

    def _start_training(self) -> None:
        self.report(f"training: {' '.join(self.train_command)}")
        self.training = subprocess.Popen(self.train_command, start_new_session=True)
        self.children.append(self.training)
        self.state.record(
            ProcessRecord(
                "training",
                "training",
                self.train_command,
                self.training.pid,
                process_created(self.training.pid),
            )
        )
        self._save()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        """First signal while training: pass it on (the trainer saves a checkpoint), stop the
        services once it exits. Before the training, or a second signal: stop at once."""
        if self.training is None or self.stopping is not None:
            raise Interrupted(signum)
        self.stopping = signum
        name = signal.Signals(signum).name
        self.report(f"{name}: stopping the training (it saves a checkpoint), then the services")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.training.pid, signum)

    def _supervise(self) -> int:
        assert self.training is not None
        while (code := self.training.poll()) is None:
            if self.stopping is None:
                for index, service in enumerate(self.services):
                    if service.process.poll() is not None:
                        self.services[index] = self._revive(service)
            time.sleep(0.2)
        return code

    def _revive(self, service: RunningService) -> RunningService:
        """Restart a dead service on its port, or stop the training and fail the launch."""
        spec, code = service.spec, service.process.returncode
        policy = self.config.launch.restart
        if not policy.enabled or service.restarts >= policy.max_restarts:
            why = (
                "launch.restart.enabled is false"
                if not policy.enabled
                else f"it was restarted {service.restarts} times already "
                f"(launch.restart.max_restarts={policy.max_restarts})"
            )
            self._stop_training()
            raise LaunchFailed(
                f"{spec.name} ({spec.url}) exited with code {code} during training and is not "
                f"restarted: {why}. The training was stopped; see {service.log_path}",
                3,
            )
        delay = policy.backoff_s * 2**service.restarts
        self.report(
            f"{spec.name} ({spec.url}) exited with code {code}; restarting it on the same port "
            f"in {delay:.1f} s (restart {service.restarts + 1} of {policy.max_restarts})"
        )
        stop_group(service.process.pid, self.config.launch.stop_timeout_s, service.process.poll)
        time.sleep(delay)
        try:
            return self._start(spec, service.restarts + 1)
        except LaunchFailed as failure:
            self._stop_training()
            raise LaunchFailed(str(failure), 3) from None

    def _stop_training(self) -> None:
        if self.training is not None:
            training = self.training
            stop_group(training.pid, self.config.launch.stop_timeout_s, training.poll)

    def _stop_everything(self, timeout_s: float | None) -> None:
        """Training first (it may still save while the services answer), then the services in
        reverse order of start; then mark the launch finished for the watchdog."""
        timeout_s = timeout_s or self.config.launch.stop_timeout_s
        services = [child for child in self.children if child is not self.training]
        first = [self.training] if self.training is not None else []
        for child in [*first, *reversed(services)]:
            stop_group(child.pid, timeout_s, child.poll)
        self.state.finished = True
        self._save()
