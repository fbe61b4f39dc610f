"""One model playing a list of episodes in this process: its policy, sampling and rollout
engine (an evaluation's, in-process or in one of its workers)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from agenttrain.agent.formats import get_format
from agenttrain.envs import get_spec
from agenttrain.envs.source import EnvSource
from agenttrain.eval.config import EvalConfig
from agenttrain.policy.base import SamplingParams
from agenttrain.policy.loader import load_policy
from agenttrain.rollout.engine import EpisodeRequest, RolloutEngine
from agenttrain.rollout.trajectory import Trajectory


def env_source(config: EvalConfig) -> EnvSource:
    """The environments `config` plays: in-process, or behind its servers."""
    return EnvSource(
        config.env,
        kwargs=config.env_kwargs,
        servers=config.servers,
        token=config.token,
        timeout_s=config.rollout.env_timeout_s,
    )


def play_episodes(
    config: EvalConfig,
    model: str,
    requests: list[EpisodeRequest],
    on_episode: Callable[[Trajectory], None],
) -> tuple[dict[str, Any], bool]:
    """`play_here` with its own environments and event loop (an evaluation worker's)."""
    envs = env_source(config)
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(envs.open(sorted({r.task_id for r in requests})))
        return play_here(config, envs, loop, model, requests, on_episode)
    finally:
        loop.run_until_complete(envs.aclose())
        loop.close()


def play_here(
    config: EvalConfig,
    envs: EnvSource,
    loop: asyncio.AbstractEventLoop,
    model: str,
    requests: list[EpisodeRequest],
    on_episode: Callable[[Trajectory], None],
) -> tuple[dict[str, Any], bool]:
    """Play `requests` with `model` in this process: (engine stats, whether it has tokens)."""
    spec = get_spec(config.env)
    policy = load_policy(
        model,
        env=config.env,
        action_format=get_format(config.rollout.action_format, config.env),
        backend=config.backend,
        device=config.device,
        inference_dtype=config.inference_dtype,
        draft_tokens=config.draft_tokens,
        system_prompt=config.rollout.system_prompt,
        max_context=config.rollout.max_context,
        openai_base_url=config.openai_base_url,
    )
    sampling = SamplingParams(
        temperature=config.temperature,
        top_p=config.top_p,
        max_new_tokens=config.rollout.max_new_tokens,
    )
    engine = RolloutEngine(policy, spec, envs.environment, config.rollout, sampling, on_episode)
    loop.run_until_complete(_run(engine, requests))
    return dict(engine.stats), policy.template is not None


async def _run(engine: RolloutEngine, requests: list[EpisodeRequest]) -> list[Trajectory]:
    try:
        return await engine.run(requests)
    finally:
        closer = getattr(engine.policy, "aclose", None)  # e.g. the OpenAI policy's HTTP session
        if closer is not None:
            await closer()
