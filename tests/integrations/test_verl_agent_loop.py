"""The verl agent loop plays agenttrain episodes against a fake token server (as verl's own
`*_on_cpu` tests do): ids, masks and log-probs line up with the transcript, env errors are
surfaced and never scored, environments are held per worker, HTTP servers work too."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

pytest.importorskip("verl", reason="agenttrain[verl] not installed (make setup installs it)")

from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, _agent_loop_registry
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.rollout.replica import TokenOutput

from agenttrain.agent.conversation import conversation_start
from agenttrain.agent.experts import OracleExpert
from agenttrain.agent.formats import get_format
from agenttrain.envs import get_spec
from agenttrain.envs.largest import SPEC as LARGEST
from agenttrain.envs.largest import LargestEnv
from agenttrain.envs.registry import register
from agenttrain.integrations.verl import workers
from agenttrain.integrations.verl.agent_loop import AgentTrainAgentLoop
from agenttrain.integrations.verl.settings import AGENT_NAME, LOOP_TARGET
from agenttrain.policy.base import ChatMessage

END = "<|im_end|>"


class OracleTokenServer:
    """verl's LLM server client, faked: replies with the TextCraft oracle's next step, as token
    ids, with made-up log-probs (-0.01 × position) so their placement can be checked."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.oracle = OracleExpert("textcraft", get_format("react", "textcraft"))
        self.request_ids: list[str] = []
        self.sampling: list[dict] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_) -> TokenOutput:
        self.request_ids.append(request_id)
        self.sampling.append(dict(sampling_params))
        conversation = []
        for turn in self.tokenizer.decode(prompt_ids).split("<|im_start|>")[1:]:
            role, _, content = turn.partition("\n")
            content = content.removesuffix(END + "\n").removesuffix(END)
            if role in ("user", "assistant") and content:
                conversation.append(ChatMessage(role, content))
        step = self.oracle.next_step(conversation)
        reply = self.oracle.format.render(step.thought, step.action)
        ids = [*self.tokenizer.encode(reply, add_special_tokens=False)]
        ids.append(self.tokenizer.convert_tokens_to_ids(END))
        return TokenOutput(token_ids=ids, log_probs=[-0.01 * (i + 1) for i in range(len(ids))])


def make_loop(tokenizer, server, response_length=4096, **settings) -> AgentTrainAgentLoop:
    config = OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {
                    "prompt_length": 2048,
                    "response_length": response_length,
                    "multi_turn": {},
                },
                "model": {},
            },
            "data": {"apply_chat_template_kwargs": {}},
        }
    )
    return AgentTrainAgentLoop(
        trainer_config=DictConfigWrap(config),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
        **settings,
    )


def play(tokenizer, server, episode: dict, **settings):
    """Build the loop inside the running event loop (verl's workers do; it keeps that loop)."""

    async def go():
        try:
            return await make_loop(tokenizer, server, **settings).run({}, **episode)
        finally:
            await workers.close_sources()

    return asyncio.run(go())


def row(env: str, task_id: int) -> dict:
    spec = get_spec(env)
    return {
        "raw_prompt": conversation_start(spec, get_format("react", spec)),
        "extra_info": {"env": env, "task_id": task_id, "index": 0},
    }


def test_the_loop_is_registered_under_its_agent_name():
    assert _agent_loop_registry[AGENT_NAME] == {"_target_": LOOP_TARGET}


def test_a_multi_turn_textcraft_episode_lines_up_ids_masks_and_logprobs(tokenizer):
    server = OracleTokenServer(tokenizer)
    out = play(tokenizer, server, row("textcraft", 12), max_new_tokens=200)
    extra = out.extra_fields
    assert extra["finish_reason"] == "done" and extra["success"] == 1
    assert out.reward_score == 1.0 and extra["env_error"] == 0
    turns = len(extra["turn_scores"])
    assert turns >= 2 and out.num_turns == 2 * turns + 1
    assert len(set(server.request_ids)) == 1  # one request id per episode: sticky session
    assert all(s["max_tokens"] <= 200 for s in server.sampling)
    assert len(out.response_ids) == len(out.response_mask) == len(out.response_logprobs)
    # Model spans: exactly the replies the server sent (with their end-of-turn), mask 1, and
    # the server's log-probs; everything else mask 0 with log-prob 0.
    spans, current, span_logprobs = [], [], []
    for token, flag, logprob in zip(
        out.response_ids, out.response_mask, out.response_logprobs, strict=True
    ):
        if flag:
            current.append(token)
            span_logprobs.append(logprob)
        else:
            assert logprob == 0.0
            if current:
                spans.append(current)
                current = []
    spans.append(current)
    assert len(spans) == turns
    for span in spans:
        assert tokenizer.decode(span).endswith(END)
    assert span_logprobs[:3] == pytest.approx([-0.01, -0.02, -0.03])
    # The whole sequence is the chat template's rendering of the transcript: no duplicated
    # replies (re-tokenized as context) and no environment text under mask 1.
    text = tokenizer.decode(out.prompt_ids + out.response_ids)
    replies = [tokenizer.decode(span, skip_special_tokens=True) for span in spans]
    assert sum(text.count(reply) for reply in replies) == len(replies)
    masked_text = tokenizer.decode(
        [t for t, m in zip(out.response_ids, out.response_mask, strict=True) if m]
    )
    assert "Crafting commands" not in masked_text and "Got " not in masked_text
    assert "Goal: craft" in tokenizer.decode(out.prompt_ids)


class CrashingLargest(LargestEnv):
    spec = dataclasses.replace(LARGEST, name="crashing-largest-verl")

    def step_sync(self, action):
        raise RuntimeError("simulator crashed")


class AnswerServer:
    async def generate(self, request_id, *, prompt_ids, sampling_params, **_) -> TokenOutput:
        ids = [*self.tokenizer.encode("Action: 7", add_special_tokens=False)]
        ids.append(self.tokenizer.convert_tokens_to_ids(END))
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids))

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer


def test_an_environment_error_is_reported_and_excluded_not_scored(tokenizer):
    register("crashing-largest-verl", CrashingLargest, replace=True)
    spec_row = row("largest", 3)
    spec_row["extra_info"]["env"] = "crashing-largest-verl"
    out = play(tokenizer, AnswerServer(tokenizer), spec_row)
    assert out.extra_fields["env_error"] == 1
    assert out.extra_fields["finish_reason"] == "env_error"
    assert "simulator crashed" in out.extra_fields["env_error_message"]
    assert out.reward_score == 0.0 and out.extra_fields["success"] == 0
    assert sum(out.response_mask) == 0  # no gradient from an episode the env broke


def test_environments_are_held_per_worker_not_per_trajectory(tokenizer):
    workers._sources.clear()

    async def two_episodes():
        for task in (1, 2):
            loop = make_loop(tokenizer, AnswerServer(tokenizer))  # verl: one object per row
            await loop.run({}, **row("largest", task))
        held = [key for key in workers._sources if key[1] == "largest"]
        await workers.close_sources()
        return held

    assert len(asyncio.run(two_episodes())) == 1


def test_episodes_play_through_an_agentgym_compatible_server(tokenizer, textcraft_url):
    server = OracleTokenServer(tokenizer)
    out = play(tokenizer, server, row("textcraft", 140), servers={"textcraft": [textcraft_url]})
    assert out.extra_fields["finish_reason"] == "done" and out.reward_score == 1.0


def test_a_row_without_our_task_is_a_clear_error(tokenizer):
    with pytest.raises(ValueError, match="agenttrain data --format verl"):
        play(tokenizer, AnswerServer(tokenizer), {"raw_prompt": [], "extra_info": {}})


def test_with_a_reward_function_the_score_is_left_to_verl(tokenizer):
    out = play(tokenizer, OracleTokenServer(tokenizer), row("textcraft", 12), reward_function=True)
    assert out.reward_score is None  # verl calls reward.custom_reward_function
    assert out.extra_fields["env_reward"] == 1.0 and out.extra_fields["success"] == 1
