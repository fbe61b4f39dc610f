"""Environments in worker processes, behind the same async `Environment` protocol.

Some environments must not share a process with many concurrent episodes: they are not
thread-safe, or they hold a JVM (SciWorld). A `WorkerPool` runs their instances in at most
`size` worker processes. Each session is pinned to one worker, whose requests run one at a
time; a worker that dies (killed, out of memory) fails only its own sessions, with a
`WorkerCrashed` error that names the cause, and the next session starts a fresh worker.
Workers that hold no session for `idle_s` seconds are stopped, which returns their memory.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import itertools
import logging
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from agenttrain.envs.base import EnvError, EnvironmentNotReset, EnvSpec, Observation, StepResult

log = logging.getLogger(__name__)

DEFAULT_IDLE_S = 300.0


class WorkerCrashed(EnvError):
    """The worker process running a session died; the session's episode is lost."""


class PoolClosed(EnvError):
    """The pool was shut down."""


@dataclass
class _Worker:
    index: int
    process: subprocess.Popen[bytes]
    conn: Connection
    calls: ThreadPoolExecutor
    """One thread per worker: its requests go out and come back one at a time."""
    sessions: set[int] = field(default_factory=set)
    idle_since: float = field(default_factory=time.monotonic)
    death: str | None = None

    @property
    def pid(self) -> int:
        return self.process.pid


class WorkerPool:
    """Instances of the registered environment `env` in up to `size` worker processes."""

    def __init__(
        self,
        env: str,
        size: int,
        kwargs: Mapping[str, Any] | None = None,
        idle_s: float = DEFAULT_IDLE_S,
    ) -> None:
        from agenttrain.envs.registry import registration

        if size < 1:
            raise ValueError(f"a worker pool needs at least one worker, not {size}")
        entry = registration(env)
        entry.check_kwargs(dict(kwargs or {}))
        preflight = getattr(entry.factory, "preflight", None)
        if preflight is not None:
            preflight()  # e.g. SciWorld: Java missing is one clear error, before any worker
        self.spec: EnvSpec = entry.spec
        self.env = env
        self.size = size
        self.kwargs = dict(kwargs or {})
        self.idle_s = idle_s
        self.crashed_total = 0
        self.started_total = 0
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self._session_ids = itertools.count()
        self._closed = threading.Event()
        self._reaper = threading.Thread(target=self._reap_idle, name="env-pool-reaper", daemon=True)
        self._reaper.start()

    def environment(self) -> PooledEnvironment:
        """A new environment whose episodes run in one of the pool's workers."""
        return PooledEnvironment(self)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            live = [w for w in self._workers if w.death is None]
            return {
                "workers": len(live),
                "max_workers": self.size,
                "sessions": sum(len(w.sessions) for w in live),
                "worker_pids": [w.pid for w in live],
                "workers_started": self.started_total,
                "workers_crashed": self.crashed_total,
            }

    def shutdown(self) -> None:
        """Stop every worker (their sessions are gone); the pool refuses new sessions."""
        self._closed.set()
        with self._lock:
            workers, self._workers = self._workers, []
        for worker in workers:
            _stop(worker)

    # -- sessions ------------------------------------------------------------------------

    async def _open(self) -> tuple[_Worker, int]:
        worker, session = self._assign()
        await self._call(worker, ("open", session, self.kwargs))
        return worker, session

    def _assign(self) -> tuple[_Worker, int]:
        """Pin a new session to a worker: a new worker while the pool has room and every
        worker is busy, else the least loaded one."""
        if self._closed.is_set():
            raise PoolClosed(f"the {self.spec.display_name} worker pool is shut down")
        with self._lock:
            live = [w for w in self._workers if w.death is None]
            busiest_free = min((len(w.sessions) for w in live), default=1)
            if len(live) < self.size and busiest_free > 0:
                worker = self._spawn()
                self._workers.append(worker)
            else:
                worker = min(live, key=lambda w: len(w.sessions))
            session = next(self._session_ids)
            worker.sessions.add(session)
            return worker, session

    def _spawn(self) -> _Worker:
        """Start a worker: a fresh interpreter (not a fork: a JVM or threads do not survive
        one) that runs `worker_main.serve_worker` on one end of a socket pair."""
        ours, theirs = multiprocessing.Pipe()
        process = subprocess.Popen(
            [sys.executable, "-m", "agenttrain.envs.worker_main", str(theirs.fileno()), self.env],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
        )
        theirs.close()
        self.started_total += 1
        index = self.started_total
        calls = ThreadPoolExecutor(1, thread_name_prefix=f"{self.env}-worker-{index}")
        return _Worker(index, process, ours, calls)

    async def _release(self, worker: _Worker, session: int) -> None:
        with self._lock:
            worker.sessions.discard(session)
            if not worker.sessions:
                worker.idle_since = time.monotonic()
        if worker.death is None:
            with contextlib.suppress(WorkerCrashed, PoolClosed):
                await self._call(worker, ("close", session, None))

    async def _call(self, worker: _Worker, request: tuple[str, int, Any]) -> Any:
        if worker.death is not None:
            raise WorkerCrashed(worker.death)
        try:
            future = worker.calls.submit(self._roundtrip, worker, request)
        except RuntimeError:  # the executor was shut down with the worker
            raise WorkerCrashed(worker.death or "the worker was stopped") from None
        status, value = await asyncio.wrap_future(future)
        if status == "error":
            raise value
        return value

    def _roundtrip(self, worker: _Worker, request: tuple[str, int, Any]) -> tuple[str, Any]:
        """Send one request and wait for its answer (on the worker's own thread)."""
        if worker.death is not None:
            raise WorkerCrashed(worker.death)
        try:
            worker.conn.send(request)
            return worker.conn.recv()
        except (EOFError, OSError):
            raise WorkerCrashed(self._bury(worker)) from None

    def _bury(self, worker: _Worker) -> str:
        """Record why a worker died and forget it; its sessions fail from now on."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            worker.process.wait(timeout=5)
        code = worker.process.returncode
        cause = (
            f"killed by {signal.Signals(-code).name}"
            if code is not None and code < 0
            else f"exit code {code}"
        )
        with self._lock:
            if worker.death is None:
                self.crashed_total += 1
                lost = len(worker.sessions)
                worker.death = (
                    f"the {self.spec.display_name} worker process (pid {worker.pid}) died "
                    f"({cause}); its {lost} session(s) are lost: reset to start a new episode"
                )
                log.error(worker.death)
            if worker in self._workers:
                self._workers.remove(worker)
        worker.conn.close()
        worker.calls.shutdown(wait=False)
        return worker.death

    def _reap_idle(self) -> None:
        interval = max(0.05, min(self.idle_s / 4, 30.0))
        while not self._closed.wait(interval):
            deadline = time.monotonic() - self.idle_s
            with self._lock:
                idle = [w for w in self._workers if not w.sessions and w.idle_since < deadline]
                for worker in idle:
                    self._workers.remove(worker)
            for worker in idle:
                log.info("stopping idle %s worker (pid %d)", self.env, worker.pid)
                _stop(worker)


class PooledEnvironment:
    """One session in a `WorkerPool`, implementing the `Environment` protocol."""

    def __init__(self, pool: WorkerPool) -> None:
        self.spec = pool.spec
        self._pool = pool
        self._worker: _Worker | None = None
        self._session = -1

    @property
    def worker_pid(self) -> int | None:
        """The process running this session (None before the first reset)."""
        return None if self._worker is None else self._worker.pid

    async def reset(self, task_id: int) -> Observation:
        if self._worker is not None and self._worker.death is not None:
            self._worker = None  # its worker died: a reset starts afresh on a live one
        if self._worker is None:
            self._worker, self._session = await self._pool._open()
        return await self._request("reset", task_id)

    async def step(self, action: str) -> StepResult:
        if self._worker is None:
            raise EnvironmentNotReset(f"{self.spec.display_name}: call reset() before step()")
        return await self._request("step", action)

    async def query(self, name: str) -> Any:
        """An environment-specific read-only query (SciWorld: `action_hint`, `goals`)."""
        if self._worker is None:
            raise EnvironmentNotReset(f"{self.spec.display_name}: call reset() before {name}")
        return await self._request("query", name)

    async def close(self) -> None:
        if self._worker is not None:
            worker, self._worker = self._worker, None
            await self._pool._release(worker, self._session)

    async def _request(self, op: str, argument: Any) -> Any:
        assert self._worker is not None
        return await self._pool._call(self._worker, (op, self._session, argument))


def _stop(worker: _Worker) -> None:
    """Ask a worker to exit (closing its environments), then make sure it has."""
    worker.death = worker.death or "the worker was stopped"
    with contextlib.suppress(OSError):
        worker.conn.close()  # the worker sees EOF and exits
    try:
        worker.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        worker.process.kill()
        worker.process.wait(timeout=5)
    worker.calls.shutdown(wait=False)


# -- pools shared by in-process runs ------------------------------------------------------

_shared: dict[tuple[str, str], WorkerPool] = {}
_shared_lock = threading.Lock()


def shared_pool(env: str, size: int, kwargs: Mapping[str, Any] | None = None) -> WorkerPool:
    """The process-wide pool for `env` with these kwargs (rollouts, eval and training use it
    through `make_env`). `AGENTTRAIN_ENV_WORKERS` overrides the registered size."""
    key = (env.lower(), repr(sorted((kwargs or {}).items())))
    with _shared_lock:
        pool = _shared.get(key)
        if pool is None or pool._closed.is_set():
            size = int(os.environ.get("AGENTTRAIN_ENV_WORKERS", size))
            pool = _shared[key] = WorkerPool(env, size, kwargs)
        return pool


@atexit.register
def _shutdown_shared() -> None:
    with _shared_lock:
        pools = list(_shared.values())
        _shared.clear()
    for pool in pools:
        pool.shutdown()
