"""One model's episodes played by several processes at once (`agenttrain eval --workers`).

On a CPU a small model's decode step is bound by per-step work that PyTorch's intra-op
threads barely split: on 2 cores, two single-threaded processes generate about twice the
tokens per second of one process using both (docs/benchmarks.md). Each worker loads the
model and plays an interleaved share of the episodes; the parent records every episode as
it ends (one writer for the model's folder), so a stop keeps what finished.
"""

from __future__ import annotations

import multiprocessing
import queue
import signal
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from agenttrain.eval.config import EvalConfig
from agenttrain.rollout.engine import EpisodeRequest
from agenttrain.rollout.trajectory import Trajectory

POLL_S = 0.5
"""How often the parent checks that its workers are alive while it waits for episodes."""
EXIT_GRACE_S = 30.0
"""How long workers that sent all their episodes get to exit on their own: a worker killed
while it exits skips its exit handlers, and Python then warns of leaked semaphores."""


class WorkerFailed(RuntimeError):
    """A worker process raised or died; its traceback (when it could send one) is the message."""


def shares(requests: Sequence[EpisodeRequest], workers: int) -> list[list[EpisodeRequest]]:
    """`requests` dealt round-robin, so each worker gets a like mix of short and long tasks
    and keeps each group's samples (adjacent in play order) mostly together."""
    return [list(requests[k::workers]) for k in range(workers) if requests[k::workers]]


def play_in_workers(
    config: EvalConfig,
    model: str,
    requests: Sequence[EpisodeRequest],
    on_episode: Callable[[Trajectory], None],
    threads: int,
) -> tuple[dict[str, float], bool]:
    """Play `requests` with `model` in `config.workers` processes of `threads` torch threads
    each, calling `on_episode` in this process as each episode ends. Returns the engines'
    summed stats (generate_s: the slowest worker's) and whether the model has a chat template."""
    context = multiprocessing.get_context("spawn")  # no forked torch or asyncio state
    events: Any = context.Queue()
    parts = shares(requests, config.workers)
    processes = [
        context.Process(
            target=_worker,
            args=(config.model_dump(mode="json"), model, part, threads, events),
            daemon=True,
        )
        for part in parts
    ]
    for process in processes:
        process.start()
    finished = False
    try:
        result = _collect(events, processes, on_episode)
        finished = True
        return result
    finally:
        wind_down(processes, EXIT_GRACE_S if finished else 0.0)
        events.close()


def wind_down(processes: Sequence[Any], grace_s: float) -> None:
    """Let the workers exit by themselves for up to `grace_s` seconds (all of them together),
    then stop the rest: after a failure or Ctrl-C `grace_s` is 0 and nothing is waited for."""
    deadline = time.monotonic() + grace_s
    for process in processes:
        process.join(timeout=max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join()


def _collect(
    events: Any, processes: list[Any], on_episode: Callable[[Trajectory], None]
) -> tuple[dict[str, float], bool]:
    stats: dict[str, float] = {}
    has_tokens = True
    running = len(processes)
    while running:
        try:
            kind, payload = events.get(timeout=POLL_S)
        except queue.Empty:
            dead = [p for p in processes if p.exitcode not in (None, 0)]
            if dead:
                raise WorkerFailed(
                    f"an evaluation worker exited with status {dead[0].exitcode}"
                ) from None
            continue
        if kind == "episode":
            on_episode(payload)
        elif kind == "error":
            raise WorkerFailed(f"an evaluation worker failed:\n{payload}")
        else:
            worker_stats, template = payload
            has_tokens = has_tokens and template
            for key, value in worker_stats.items():
                merge = max if key == "generate_s" else (lambda a, b: a + b)
                stats[key] = merge(stats.get(key, 0), value)
            running -= 1
    return stats, has_tokens


def _worker(
    config_json: dict[str, Any],
    model: str,
    requests: list[EpisodeRequest],
    threads: int,
    events: Any,
) -> None:
    """A worker process: Ctrl-C is the parent's to handle (it stops the workers)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import torch

        from agenttrain.eval.playing import play_episodes

        torch.set_num_threads(threads)
        config = EvalConfig.model_validate(config_json)
        stats, template = play_episodes(
            config, model, requests, lambda t: events.put(("episode", t))
        )
        events.put(("done", (stats, template)))
    except BaseException:
        events.put(("error", traceback.format_exc()))
        raise
