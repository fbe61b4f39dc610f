"""The rollout engine: token bookkeeping, classification of failures, batching."""

from __future__ import annotations

import asyncio
import time

import pytest
import torch

from agenttrain.agent.experts import OracleExpert
from agenttrain.agent.formats import REACT_HELP, get_format
from agenttrain.envs import (
    EnvSpec,
    LocalEnvironment,
    Observation,
    StepResult,
    WireProtocol,
    get_spec,
    make_env,
)
from agenttrain.policy.base import ChatMessage, Generation, SamplingParams
from agenttrain.policy.chat import ChatTemplate
from agenttrain.policy.chat_adapter import ChatPolicyAdapter
from agenttrain.policy.hf import HFPolicy
from agenttrain.rollout import EpisodeRequest, RolloutConfig, RolloutEngine, read_jsonl, write_jsonl

TEXTCRAFT = get_spec("textcraft")


def run(policy, requests, spec=TEXTCRAFT, factory=None, **config):
    engine = RolloutEngine(
        policy,
        spec,
        factory or (lambda: make_env(spec.name)),
        RolloutConfig(**config),
        SamplingParams(),
    )
    return engine, asyncio.run(engine.run(requests))


class RecordingPolicy:
    """Delegates to a real policy and records what it generated, per episode."""

    def __init__(self, policy: HFPolicy) -> None:
        self.inner = policy
        self.name, self.tokenizer, self.template = policy.name, policy.tokenizer, policy.template
        self.max_context = policy.max_context
        self.generated: dict[str, list[Generation]] = {}

    def generate(self, requests, sampling):
        results = self.inner.generate(requests, sampling)
        for request, result in zip(requests, results, strict=True):
            self.generated.setdefault(request.key, []).append(result)
        return results

    def release(self, key):
        self.inner.release(key)


class ScriptedOracle:
    """A token policy whose replies are the oracle's, as the tokenizer would encode them."""

    def __init__(self, template, tokenizer) -> None:
        self.name, self.template, self.tokenizer = "scripted-oracle", template, tokenizer
        self.max_context = 8192
        self.oracle = OracleExpert("textcraft", get_format("react", "textcraft"))

    def generate(self, requests, sampling):
        results = []
        for request in requests:
            text = self.tokenizer.decode(request.prompt_ids)
            turns = text.split("<|im_start|>")[1:]
            conversation = []
            for turn in turns:
                role, _, content = turn.partition("\n")
                conversation.append(
                    ChatMessage(
                        role, content.removesuffix("<|im_end|>\n").removesuffix("<|im_end|>")
                    )
                )
            conversation = [
                m for m in conversation if m.role in ("user", "assistant") and m.content
            ]
            step = self.oracle.next_step(conversation)
            reply = self.oracle.format.render(step.thought, step.action)
            ids = [*self.template.encode(reply), self.template.end_of_turn_id]
            results.append(Generation(ids, [0.0] * len(ids), "stop"))
        return results

    def release(self, key):
        pass


def test_episode_ids_are_exactly_the_chat_template_of_the_transcript(tokenizer):
    template = ChatTemplate(tokenizer)
    scripted = ScriptedOracle(template, tokenizer)
    _, [trajectory] = run(scripted, [EpisodeRequest(543, "g")], max_turns=60)
    assert trajectory.finish_reason == "done" and trajectory.success
    assert trajectory.num_turns > 10
    rendered = template.render(trajectory.messages, add_generation_prompt=False)
    expected = template.encode(rendered)
    _, trailing = template._assistant_end
    ids = trajectory.prompt_ids + trajectory.response_ids
    assert ids + template.encode(trailing) == expected
    first = trajectory.messages[:3]
    assert trajectory.prompt_ids == template.encode(
        template.render(first, add_generation_prompt=True)
    )


def test_model_tokens_are_untouched_and_masks_and_logprobs_line_up(tiny_model, tokenizer):
    policy = RecordingPolicy(HFPolicy(tiny_model, tokenizer, name="tiny"))
    _, trajectories = run(
        policy,
        [EpisodeRequest(t, str(t), seed=t) for t in (3, 12)],
        action_format="raw",
        max_turns=3,
        max_new_tokens=12,
    )
    for trajectory in trajectories:
        generations = policy.generated[trajectory.episode_id]
        assert len(generations) == trajectory.num_turns == 3
        mask, ids = trajectory.response_mask, trajectory.response_ids
        assert len(mask) == len(ids) == len(trajectory.logprobs)
        runs, position = [], 0
        while position < len(mask):  # the mask-1 runs, in order
            if mask[position]:
                end = position
                while end < len(mask) and mask[end]:
                    end += 1
                runs.append((position, end))
                position = end
            else:
                position += 1
        assert [ids[a:b] for a, b in runs] == [g.token_ids for g in generations]
        assert [trajectory.logprobs[a:b] for a, b in runs] == [g.logprobs for g in generations]
        # Every log-prob matches a forward pass over the whole episode.
        sequence = torch.tensor([trajectory.prompt_ids + ids])
        with torch.no_grad():
            logits = tiny_model(sequence).logits[0]
        offset = len(trajectory.prompt_ids)
        positions = [offset + i for i, m in enumerate(mask) if m]
        expected = torch.log_softmax(logits[[p - 1 for p in positions]], -1).gather(
            -1, sequence[0, positions][:, None]
        )[:, 0]
        got = torch.tensor([trajectory.logprobs[p - offset] for p in positions])
        assert torch.allclose(got, expected, atol=1e-4)
        assert trajectory.finish_reason == "max_turns"
        assert trajectory.generated_tokens == sum(mask)


def slow_textcraft():
    """TextCraft whose steps take longer than a short decode, as a remote server's do."""
    env = make_env("textcraft")
    step = env.step

    async def slow_step(action):
        await asyncio.sleep(0.2)
        return await step(action)

    env.step = slow_step
    return env


def test_generation_is_batched_across_episodes(tiny_model, tokenizer):
    policy = HFPolicy(tiny_model, tokenizer, name="tiny")
    engine, trajectories = run(
        policy,
        [EpisodeRequest(t, str(t), seed=t) for t in range(8)],
        factory=slow_textcraft,
        action_format="raw",
        max_turns=3,
        max_new_tokens=6,
    )
    assert all(t.num_turns == 3 for t in trajectories)
    # one decoding stream for every turn of every episode: later turns join it, and it
    # waits out the environment steps instead of ending (it was one call per turn before
    # streaming, and a call per turn whenever every row finished before an episode stepped)
    assert engine.stats["generate_calls"] == 1


class FixedBatches(HFPolicy):
    """The same policy decoding one fixed batch per call, as before continuous batching."""

    streams = False


@pytest.mark.parametrize("decode", ["arena", "graph"])
def test_continuous_batching_plays_the_episodes_a_fixed_batch_plays(tiny_model, tokenizer, decode):
    """Streaming changes when a turn decodes, not what it samples: the same episodes, token
    for token, as fixed batches, with turns of different lengths (the context limit cuts
    some replies short). Whether a turn joins mid-decode here depends on thread timing;
    tests/policy/test_decoder.py makes rows join at chosen steps."""
    requests = [EpisodeRequest(t, str(t), seed=t) for t in range(6)]
    settings = {"action_format": "raw", "max_turns": 3, "max_new_tokens": 24, "max_context": 600}
    streaming = HFPolicy(tiny_model, tokenizer, name="tiny", decode=decode)
    _, streamed = run(streaming, requests, **settings)
    fixed_batches = FixedBatches(tiny_model, tokenizer, name="tiny", decode=decode)
    _, fixed = run(fixed_batches, requests, **settings)
    assert len({len(t.response_ids) for t in fixed}) > 1  # episodes of different lengths
    for ours, theirs in zip(streamed, fixed, strict=True):
        assert (ours.task_id, ours.finish_reason) == (theirs.task_id, theirs.finish_reason)
        assert ours.response_ids == theirs.response_ids
        assert ours.response_mask == theirs.response_mask
        assert torch.allclose(torch.tensor(ours.logprobs), torch.tensor(theirs.logprobs), atol=1e-5)


class BrokenStream(FixedBatches):
    """Delivers the first request it is ever given; then its decoder fails, every call."""

    streams = True
    delivered = False

    def generate_stream(self, stream, sampling):
        if not self.delivered:
            self.delivered = True
            request, handle = stream.take(1)[0]
            stream.deliver(handle, self.generate([request], sampling)[0])
        stream.take(8)
        raise RuntimeError("decoder broke")


def four_episodes(policy):
    """Four short TextCraft episodes of `policy`, bounded in time (a hang fails the test)."""
    engine = RolloutEngine(
        policy,
        TEXTCRAFT,
        lambda: make_env("textcraft"),
        RolloutConfig(action_format="raw", max_turns=3, max_new_tokens=4),
        SamplingParams(),
    )
    requests = [EpisodeRequest(t, str(t), seed=t) for t in range(4)]
    return asyncio.run(asyncio.wait_for(engine.run(requests), timeout=120))


def test_a_failing_stream_ends_its_episodes_with_the_error_not_a_hang(tiny_model, tokenizer):
    trajectories = four_episodes(BrokenStream(tiny_model, tokenizer, name="tiny"))
    assert [t.finish_reason for t in trajectories] == ["agent_error"] * 4
    assert all(t.error == "RuntimeError: decoder broke" for t in trajectories)
    assert sorted(t.num_turns for t in trajectories) == [0, 0, 0, 1]  # the delivered turn


class DeadOnArrival(FixedBatches):
    """A streaming policy whose decoder fails before it takes a single request."""

    streams = True

    def generate_stream(self, stream, sampling):
        raise RuntimeError("no memory for the cache")


def test_a_stream_that_fails_before_taking_anything_fails_the_queued_turns(tiny_model, tokenizer):
    trajectories = four_episodes(DeadOnArrival(tiny_model, tokenizer, name="tiny"))
    assert [t.error for t in trajectories] == ["RuntimeError: no memory for the cache"] * 4
    assert [t.finish_reason for t in trajectories] == ["agent_error"] * 4


def test_a_row_that_ends_after_ctrl_c_closed_the_loop_is_dropped_quietly():
    """After Ctrl-C an evaluation closes its event loop while the decoder thread may still
    finish rows; their results have nobody to go to, and must not raise in that thread."""
    from agenttrain.rollout.engine import _Arrivals

    loop = asyncio.new_event_loop()
    future = loop.create_future()
    arrivals = _Arrivals(lambda limit: [], loop)
    loop.close()
    arrivals.deliver(future, Generation([1], [0.0], "stop"))
    assert not future.done()


class BrokenEnv(LocalEnvironment):
    spec = EnvSpec(
        name="broken-test",
        display_name="Broken",
        description="fails on step",
        conversation_start=TEXTCRAFT.conversation_start,
        agentgym_conversation_start=TEXTCRAFT.agentgym_conversation_start,
        default_max_turns=5,
        action_format="react",
        protocol=WireProtocol(root_text="broken"),
        split_loader=lambda: {},
    )
    hang_s = 0.0
    blocking = True

    def reset_sync(self, task_id: int) -> Observation:
        return Observation("Goal: craft bread.")

    def step_sync(self, action: str) -> StepResult:
        if self.hang_s:
            time.sleep(self.hang_s)
        raise RuntimeError("simulator died")


def test_environment_errors_end_the_episode_unscored(tiny_model, tokenizer):
    policy = HFPolicy(tiny_model, tokenizer, name="tiny")
    _, [trajectory] = run(
        policy,
        [EpisodeRequest(0, "g")],
        spec=BrokenEnv.spec,
        factory=BrokenEnv,
        action_format="raw",
        max_new_tokens=4,
    )
    assert trajectory.finish_reason == "env_error"
    assert trajectory.reward is None and not trajectory.success
    assert trajectory.error == "RuntimeError: simulator died"


def test_environment_timeouts_are_environment_errors(tiny_model, tokenizer):
    class Hanging(BrokenEnv):
        hang_s = 2.0

    policy = HFPolicy(tiny_model, tokenizer, name="tiny")
    _, [trajectory] = run(
        policy,
        [EpisodeRequest(0, "g")],
        spec=BrokenEnv.spec,
        factory=Hanging,
        action_format="raw",
        max_new_tokens=4,
        env_timeout_s=0.2,
    )
    assert trajectory.finish_reason == "env_error" and trajectory.reward is None
    assert trajectory.error.startswith("timeout")


def test_format_errors_tell_the_model_the_format_and_are_counted(tiny_model, tokenizer):
    steps = []

    class Counting(LocalEnvironment):
        spec = TEXTCRAFT

        def reset_sync(self, task_id):
            return Observation("Crafting commands:\n\nGoal: craft bread.")

        def step_sync(self, action):
            steps.append(action)
            return StepResult("Could not execute", 0.0, False)

    policy = HFPolicy(tiny_model, tokenizer, name="tiny")
    _, [trajectory] = run(
        policy,
        [EpisodeRequest(0, "g")],
        factory=Counting,
        action_format="react",
        max_new_tokens=6,
        max_format_errors=2,
    )
    assert steps == []  # random replies carry no "Action:": the environment is never called
    assert trajectory.finish_reason == "format_error"
    assert trajectory.format_errors == trajectory.num_turns == 2
    assert trajectory.messages[4] == {"role": "user", "content": REACT_HELP}
    assert trajectory.reward == 0.0  # a policy failure scores 0; only env errors are unscored


def test_a_full_context_ends_the_episode(tiny_model, tokenizer):
    policy = HFPolicy(tiny_model, tokenizer, name="tiny")
    _, [trajectory] = run(
        policy,
        [EpisodeRequest(12, "g")],
        action_format="raw",
        max_new_tokens=16,
        max_context=640,
        max_turns=50,
    )
    assert trajectory.finish_reason == "context_limit"
    assert len(trajectory.prompt_ids) + len(trajectory.response_ids) <= 640


@pytest.mark.parametrize("name", ["react", "adapt", "json", "raw"])
def test_the_oracle_solves_tasks_through_the_engine_in_every_format(name):
    oracle = ChatPolicyAdapter(OracleExpert("textcraft", get_format(name, "textcraft")))
    _, trajectories = run(
        oracle,
        [EpisodeRequest(t, str(t)) for t in (12, 140, 543)],
        action_format=name,
        max_turns=60,
    )
    assert all(t.success and t.finish_reason == "done" for t in trajectories)
    assert trajectories[0].prompt_ids == []  # chat-only backends carry no token ids
    asyncio.run(oracle.aclose())


def test_trajectories_round_trip_through_jsonl(tmp_path, tiny_model, tokenizer):
    policy = HFPolicy(tiny_model, tokenizer, name="tiny")
    _, trajectories = run(
        policy,
        [EpisodeRequest(t, "g", sample=t) for t in (1, 2)],
        action_format="raw",
        max_turns=2,
        max_new_tokens=5,
    )
    path = tmp_path / "episodes.jsonl"
    assert write_jsonl(path, trajectories) == 2
    assert list(read_jsonl(path)) == trajectories


def test_an_episode_request_can_set_its_own_turn_limit(tiny_model, tokenizer):
    policy = HFPolicy(tiny_model, tokenizer, name="tiny")
    requests = [EpisodeRequest(0, "a"), EpisodeRequest(1, "b", max_turns=1)]
    _, (default, limited) = run(
        policy, requests, max_turns=3, max_new_tokens=4, max_format_errors=10
    )
    assert (default.num_turns, default.finish_reason) == (3, "max_turns")
    assert (limited.num_turns, limited.finish_reason) == (1, "max_turns")
    # 4 new tokens from a random model never reach the end-of-turn token: turns are cut off
    assert all(turn.cut_off for turn in default.turns)


class ScoreDeltaEnv(LocalEnvironment):
    """Each step adds 0.25 to the score and rewards the change; done after three steps."""

    spec = EnvSpec(
        name="score-delta-test",
        display_name="Score delta",
        description="test environment",
        conversation_start=(),
        agentgym_conversation_start=(),
        default_max_turns=5,
        action_format="raw",
        protocol=WireProtocol(root_text="score delta"),
        split_loader=lambda: {"test": [0]},
        success_reward=0.75,
        episode_reward="sum",
    )

    def reset_sync(self, task_id):
        self.steps = 0
        return Observation("start")

    def step_sync(self, action):
        self.steps += 1
        return StepResult("ok", 0.25, self.steps >= 3)


class SaysGo:
    name = "says-go"

    async def chat(self, conversations, sampling):
        from agenttrain.policy.base import TextGeneration

        return [TextGeneration("go") for _ in conversations]


@pytest.mark.parametrize(("rule", "reward", "success"), [(None, 0.75, True), ("last", 0.25, False)])
def test_the_episode_reward_follows_the_environments_rule_unless_configured(rule, reward, success):
    policy = ChatPolicyAdapter(SaysGo())
    _, [trajectory] = run(
        policy,
        [EpisodeRequest(0, "g")],
        spec=ScoreDeltaEnv.spec,
        factory=ScoreDeltaEnv,
        action_format="raw",
        reward=rule,
    )
    asyncio.run(policy.aclose())
    assert trajectory.reward == reward and trajectory.success is success


class OracleFailingOn:
    """The TextCraft oracle as a chat backend, raising for one task's conversations."""

    def __init__(self, failing_goal: str) -> None:
        self.name = "oracle"
        self.oracle = OracleExpert("textcraft", get_format("react", "textcraft"))
        self.failing_goal = failing_goal

    async def chat(self, conversations, sampling):
        for conversation in conversations:
            if any(self.failing_goal in m.content for m in conversation):
                raise RuntimeError("the solver lost track of the game")
        return await self.oracle.chat(conversations, sampling)


def test_one_episodes_solver_failure_is_that_episodes_error_only():
    goals = {t: make_env("textcraft") for t in (12, 140, 543)}
    first = {t: asyncio.run(env.reset(t)).text for t, env in goals.items()}
    failing = TEXTCRAFT.describe(first[140])["goal"]
    policy = ChatPolicyAdapter(OracleFailingOn(failing))
    _, trajectories = run(policy, [EpisodeRequest(t, str(t)) for t in (12, 140, 543)], max_turns=60)
    by_task = {t.task_id: t for t in trajectories}
    assert by_task[140].finish_reason == "agent_error" and by_task[140].errored
    assert by_task[140].reward is None and not by_task[140].success
    assert by_task[140].error == "RuntimeError: the solver lost track of the game"
    assert all(by_task[t].success for t in (12, 543))  # played on in the same batches
    asyncio.run(policy.aclose())


class RaisingParser:
    """An action format whose parser raises on one reply."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def parse(self, reply):
        raise ValueError("cannot read this reply")


def test_a_parser_exception_is_an_agent_error_not_the_end_of_the_run():
    oracle = ChatPolicyAdapter(OracleExpert("textcraft", get_format("react", "textcraft")))
    engine = RolloutEngine(
        oracle, TEXTCRAFT, lambda: make_env("textcraft"), RolloutConfig(), SamplingParams()
    )
    engine.format = RaisingParser(engine.format)
    trajectories = asyncio.run(engine.run([EpisodeRequest(12, "12"), EpisodeRequest(140, "140")]))
    assert [t.finish_reason for t in trajectories] == ["agent_error", "agent_error"]
    assert trajectories[0].error == "ValueError: cannot read this reply"
    asyncio.run(oracle.aclose())


def _plan_length(task: int) -> int:
    observation = asyncio.run(make_env("textcraft").reset(task)).text
    return len(TEXTCRAFT.oracle.plan(observation))


def test_an_episode_with_an_oracle_start_continues_from_the_oracles_turns_in_its_prompt(tokenizer):
    template = ChatTemplate(tokenizer)
    scripted = ScriptedOracle(template, tokenizer)
    length = _plan_length(543)
    _, [trajectory] = run(scripted, [EpisodeRequest(543, "g", oracle_share=0.5)], max_turns=60)
    guided = length // 2
    assert trajectory.oracle_turns == guided > 0
    assert trajectory.success and trajectory.num_turns == length
    # The oracle's turns are prompt: no token of theirs is in the response or trained on.
    prompt_messages = trajectory.messages[: 3 + 2 * guided]
    assert prompt_messages[-1]["role"] == "user"
    assert trajectory.prompt_ids == template.prompt_ids(prompt_messages)
    assert [t.token_span for t in trajectory.turns[:guided]] == [None] * guided
    assert all(t.token_span is not None for t in trajectory.turns[guided:])
    expected = template.encode(template.render(trajectory.messages, add_generation_prompt=False))
    _, trailing = template._assistant_end
    assert trajectory.prompt_ids + trajectory.response_ids + template.encode(trailing) == expected


def test_a_oracle_start_always_leaves_the_model_a_turn(tiny_model, tokenizer):
    policy = RecordingPolicy(HFPolicy(tiny_model, tokenizer, name="tiny"))
    length = _plan_length(543)
    _, [long_plan, short_limit] = run(
        policy,
        [
            EpisodeRequest(543, "a", oracle_share=0.99),
            EpisodeRequest(543, "b", oracle_share=0.99, max_turns=3),
        ],
        max_turns=60,
        max_new_tokens=8,
    )
    assert long_plan.oracle_turns == length - 1
    assert short_limit.oracle_turns == 2 and short_limit.num_turns == 3
    for trajectory in (long_plan, short_limit):
        asked = policy.generated[trajectory.episode_id]
        assert len(asked) == trajectory.num_turns - trajectory.oracle_turns >= 1
        assert sum(trajectory.response_mask) == sum(len(g.token_ids) for g in asked)
