"""A worker process of an environment pool: `python -m agenttrain.envs.worker_main FD ENV`.

It builds, drives and closes instances of environment ENV on request over the connection FD,
until the pool closes it. Kept apart from `workers` (the pool, in the parent): the worker
needs the registry, and the registry needs the pool, so one module holding both was a circle.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from agenttrain.envs.base import EnvError
from agenttrain.envs.registry import registration


def serve_worker(conn: Connection, env: str) -> None:
    """A worker's main loop: build, drive and close environments on request until EOF."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    entry = registration(env)
    loop = asyncio.new_event_loop()
    envs: dict[int, Any] = {}
    handlers: dict[str, Callable[[int, Any], Any]] = {
        "open": lambda s, kwargs: envs.__setitem__(s, entry.build_here(**kwargs)),
        "reset": lambda s, task: loop.run_until_complete(envs[s].reset(task)),
        "step": lambda s, action: loop.run_until_complete(envs[s].step(action)),
        "query": lambda s, name: loop.run_until_complete(envs[s].query(name)),
        "close": lambda s, _: loop.run_until_complete(_close(envs.pop(s, None))),
    }
    while True:
        try:
            op, session, argument = conn.recv()
        except (EOFError, OSError):
            break
        try:
            answer: tuple[str, Any] = ("ok", handlers[op](session, argument))
        except Exception as failure:
            answer = ("error", _portable(failure))
        conn.send(answer)
    for instance in envs.values():
        with contextlib.suppress(Exception):
            loop.run_until_complete(_close(instance))


async def _close(instance: Any) -> None:
    if instance is not None:
        await instance.close()


def _portable(failure: Exception) -> Exception:
    """The exception itself if it survives pickling, else an EnvError with its text."""
    import pickle

    try:
        pickle.loads(pickle.dumps(failure))
        return failure
    except Exception:
        return EnvError(f"{type(failure).__name__}: {failure}")


if __name__ == "__main__":
    serve_worker(Connection(int(sys.argv[1])), sys.argv[2])
