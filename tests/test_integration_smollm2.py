"""The real embedded model (SmolLM2-135M-Instruct) plays TextCraft through the HTTP server."""

from __future__ import annotations

import asyncio
import math

import pytest
import torch

from agenttrain.agent.formats import get_format
from agenttrain.envs import get_spec
from agenttrain.policy.base import SamplingParams
from agenttrain.policy.loader import load_policy
from agenttrain.rollout import EpisodeRequest, RolloutConfig, RolloutEngine
from agenttrain.serving.client import EnvServerPool
from support import health

pytestmark = pytest.mark.slow  # the real model plays through a server


def test_smollm2_plays_two_textcraft_tasks_through_the_server(textcraft_url):
    spec = get_spec("textcraft")
    policy = load_policy(
        "smollm2-135m",
        env="textcraft",
        action_format=get_format("react", "textcraft"),
        inference_dtype="float32",
    )
    config = RolloutConfig(max_turns=3, max_new_tokens=48)
    before = health(textcraft_url)["sessions"]

    async def play():
        async with EnvServerPool("textcraft", textcraft_url) as pool:
            engine = RolloutEngine(
                policy,
                spec,
                pool.environment,
                config,
                SamplingParams(temperature=0.7, max_new_tokens=48),
            )
            return await engine.run(
                [EpisodeRequest(t, str(t), seed=1) for t in spec.split("test")[:2]]
            )

    trajectories = asyncio.run(play())
    assert health(textcraft_url)["sessions"] == before  # every session was closed
    for trajectory in trajectories:
        assert trajectory.finish_reason in ("done", "max_turns", "format_error", "context_limit")
        assert trajectory.error is None and trajectory.num_turns >= 1
        assert trajectory.task_info["goal"] in trajectory.messages[2]["content"]
        assert (
            len(trajectory.response_ids)
            == len(trajectory.response_mask)
            == len(trajectory.logprobs)
        )
        sampled = [
            lp for lp, m in zip(trajectory.logprobs, trajectory.response_mask, strict=True) if m
        ]
        assert sampled and all(math.isfinite(lp) and lp <= 0 for lp in sampled)
        # The recorded log-probs are the model's: recompute them with a forward pass.
        ids = torch.tensor([trajectory.prompt_ids + trajectory.response_ids])
        with torch.no_grad():
            logits = policy.model(ids).logits[0].float() / 0.7
        offset = len(trajectory.prompt_ids)
        positions = [offset + i for i, m in enumerate(trajectory.response_mask) if m]
        recomputed = torch.log_softmax(logits[[p - 1 for p in positions]], -1).gather(
            -1, ids[0, positions][:, None]
        )[:, 0]
        assert torch.allclose(torch.tensor(sampled), recomputed, atol=1e-3)
