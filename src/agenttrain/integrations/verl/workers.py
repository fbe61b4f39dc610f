"""Environments held per verl worker process, not per trajectory.

verl builds a new agent-loop (or calls one interaction object) for every trajectory; opening
an HTTP pool or building in-process environments each time would be wasteful, so each worker
keeps one `EnvSource` per environment name and event loop, opened on first use.
"""

from __future__ import annotations

import asyncio

from agenttrain.agent.formats import get_format
from agenttrain.envs.base import Environment, EnvSpec, Observation, StepResult
from agenttrain.envs.source import EnvSource
from agenttrain.integrations.verl.settings import LoopSettings
from agenttrain.rollout.turns import EpisodeTurns, TurnRules

_sources: dict[tuple[int, str], EnvSource] = {}
_source_locks: dict[tuple[int, str], asyncio.Lock] = {}


async def environment_source(name: str, settings: LoopSettings) -> EnvSource:
    """This worker's one `EnvSource` for `name` (per event loop), opened on first use."""
    key = (id(asyncio.get_running_loop()), name)
    lock = _source_locks.setdefault(key, asyncio.Lock())
    async with lock:
        if key not in _sources:
            source = EnvSource(
                name,
                kwargs=settings.env_kwargs.get(name),
                servers=settings.servers.get(name, ()),
                token=settings.token,
                timeout_s=settings.env_timeout_s,
            )
            await source.open()
            _sources[key] = source
    return _sources[key]


class _Unavailable:
    """An environment that could not be opened (an unreachable server, say): its reset
    raises the failure, so the turn logic records that episode's env_error."""

    def __init__(self, failure: Exception) -> None:
        self.failure = failure

    async def reset(self, task_id: int) -> Observation:
        raise self.failure

    async def step(self, action: str) -> StepResult:
        raise self.failure

    async def close(self) -> None:
        return None


async def open_environment(name: str, settings: LoopSettings) -> Environment:
    """One episode's environment from this worker's source. A source that cannot open is
    that episode's env_error, never the batch's: verl plays a whole batch in one call, and
    the next episode tries the source again (a restarted server is picked up)."""
    try:
        source = await environment_source(name, settings)
        return source.environment()
    except Exception as failure:  # any failure to open is this episode's, classified later
        return _Unavailable(failure)


async def episode_turns(spec: EnvSpec, settings: LoopSettings) -> EpisodeTurns:
    """One episode's turn logic under the loop's settings, on an environment of this worker
    (the agent loop and the interaction share it; their token bookkeeping differs)."""
    rules = TurnRules(
        settings.env_timeout_s,
        settings.max_format_errors,
        settings.max_turns or spec.default_max_turns,
        settings.reward,
    )
    env = await open_environment(spec.name, settings)
    return EpisodeTurns(spec, get_format(settings.action_format, spec), env, rules)


async def close_sources() -> None:
    """Close this event loop's sources (their sessions and HTTP pools), e.g. at shutdown."""
    loop_id = id(asyncio.get_running_loop())
    for key in [key for key in _sources if key[0] == loop_id]:
        await _sources.pop(key).aclose()
        _source_locks.pop(key, None)
