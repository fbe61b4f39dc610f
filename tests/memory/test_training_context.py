"""Experience in rollouts: shown to the policy in the first user turn, never in what trains."""

from __future__ import annotations

import asyncio

import torch

from agenttrain.envs import get_spec, make_env
from agenttrain.memory.experience import BLOCK_START
from agenttrain.policy.base import SamplingParams
from agenttrain.policy.hf import HFPolicy
from agenttrain.rl.batch import collate
from agenttrain.rl.losses import Totals, ppo_clip_loss
from agenttrain.rollout import EpisodeRequest, RolloutConfig, RolloutEngine

TEXTCRAFT = get_spec("textcraft")
ADVICE = "Memory 1 :\n When to use: Task: stick\n Content: get 2 planks, then craft 4 stick"


class PromptRecorder:
    """A real policy that records every prompt it was asked to continue."""

    def __init__(self, policy: HFPolicy) -> None:
        self.inner = policy
        self.name, self.tokenizer, self.template = policy.name, policy.tokenizer, policy.template
        self.max_context = policy.max_context
        self.prompts: dict[str, list[list[int]]] = {}

    def generate(self, requests, sampling):
        for request in requests:
            self.prompts.setdefault(request.key, []).append(list(request.prompt_ids))
        return self.inner.generate(requests, sampling)

    def release(self, key):
        self.inner.release(key)


def contains(sequence: list[int], part: list[int]) -> bool:
    return any(sequence[i : i + len(part)] == part for i in range(len(sequence) - len(part) + 1))


def test_experience_is_seen_while_playing_but_never_reaches_the_training_batch(
    tiny_model, tokenizer
):
    policy = PromptRecorder(HFPolicy(tiny_model, tokenizer, name="tiny"))
    goals: list[str] = []

    async def retrieve(goal: str) -> str:
        goals.append(goal)
        return ADVICE

    engine = RolloutEngine(
        policy,
        TEXTCRAFT,
        lambda: make_env("textcraft"),
        RolloutConfig(max_turns=2, max_new_tokens=16),
        SamplingParams(),
        experience=retrieve,
    )
    task = TEXTCRAFT.split("train")[0]
    guided, plain = asyncio.run(
        engine.run(
            [
                EpisodeRequest(task, "g", sample=0, seed=1, with_experience=True),
                EpisodeRequest(task, "g", sample=1, seed=1),
            ]
        )
    )
    assert goals == [guided.task_info["goal"]]  # the task's goal, not the fixed instructions
    assert guided.experience == ADVICE and plain.experience is None
    advice_ids = tokenizer.encode(ADVICE, add_special_tokens=False)[4:]
    first_prompt = policy.prompts[guided.episode_id][0]
    assert contains(first_prompt, advice_ids)  # the policy saw the block
    # ... but the trajectory keeps the prompt without it, exactly as a plain episode's.
    assert guided.prompt_ids == plain.prompt_ids
    assert all(BLOCK_START not in message["content"] for message in guided.messages)
    assert guided.prompt_ids == policy.template.prompt_ids(guided.messages[: len(engine.start) + 1])
    batch = collate([guided, plain], pad_id=0, device=torch.device("cpu"))
    row = batch.input_ids[0][: len(guided.prompt_ids) + len(guided.response_ids)].tolist()
    assert row == guided.prompt_ids + guided.response_ids
    assert not contains(row, advice_ids)
    trained = batch.responses[0][batch.response_mask[0].bool()].tolist()
    sampled = [t for t, m in zip(guided.response_ids, guided.response_mask, strict=True) if m]
    assert trained == sampled  # only tokens the model sampled carry loss


def test_episodes_played_with_experience_get_their_own_upper_clip():
    ratio = torch.tensor([[1.5], [1.5]])
    advantages = torch.ones(2, 1)
    mask = torch.ones(2, 1)
    loss = ppo_clip_loss(
        ratio.log(),
        torch.zeros(2, 1),
        advantages,
        mask,
        clip_low=0.2,
        clip_high=torch.tensor([[0.28], [0.6]]),
        clip_c=3.0,
        agg_mode="seq-mean-token-sum",
        totals=Totals(tokens=2, sequences=1),
    )
    # plain row clipped at 1.28, guided row (off clip 0.6) keeps its 1.5 ratio
    assert torch.isclose(loss.loss, torch.tensor(-(1.28 + 1.5)))
