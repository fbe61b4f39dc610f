"""The static-shape decode path (CUDA graphs on a GPU) against the arena decoder and the
model's own forward pass, on a tiny random model; on CPU the same step runs eagerly."""

from __future__ import annotations

import copy
import functools
import math

import pytest
import torch

from agenttrain.policy.base import GenerationRequest, SamplingParams
from agenttrain.policy.decoder import LlamaFamilyDecoder
from agenttrain.policy.graph_decoder import SYNC_EVERY, GraphDecoder, bucket
from agenttrain.policy.hf import HFPolicy
from agenttrain.policy.sampling import race, token_logprobs, truncate
from support import Trickle


def forward_logprobs(model, prompt, generated, temperature):
    ids = torch.tensor([list(prompt) + list(generated)])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1]
    return token_logprobs(logits, ids[0, len(prompt) :], temperature)


def prompts_for(policy, count, words=3):
    return [
        policy.template.prompt_ids(
            [{"role": "user", "content": f"Task {i}: {'word ' * (words * i)}"}]
        )
        for i in range(count)
    ]


def graph_policy(model, tokenizer):
    policy = HFPolicy(model, tokenizer, name="tiny", decode="graph")
    assert isinstance(policy.decoder, GraphDecoder)
    return policy


def test_auto_picks_the_arena_decoder_on_cpu(tiny_model, tokenizer):
    policy = HFPolicy(tiny_model, tokenizer, name="tiny")
    assert type(policy.decoder) is LlamaFamilyDecoder


def test_greedy_turns_match_the_arena_decoder_and_reuse_the_cache(tiny_model, tokenizer):
    arena = HFPolicy(tiny_model, tokenizer, name="tiny", decode="arena")
    graph = graph_policy(tiny_model, tokenizer)
    params = SamplingParams(temperature=0.0, max_new_tokens=20)
    prompts = prompts_for(arena, 5)
    for turn in range(2):
        requests = [GenerationRequest(p, key=f"e{i}") for i, p in enumerate(prompts)]
        before = graph.decoder.stats["prefill_tokens"]
        expected = arena.generate(requests, params)
        got = graph.generate(requests, params)
        for a, b in zip(expected, got, strict=True):
            assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
            assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-5
        observation = tokenizer.encode("observation", add_special_tokens=False)
        if turn == 1:  # only the new tokens of turn 2 ran through the model
            assert graph.decoder.stats["prefill_tokens"] - before == 5 * (1 + len(observation))
        prompts = [
            p + g.token_ids + observation for p, g in zip(prompts, got, strict=True)
        ]  # the next turn extends the cached one


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=1.0, max_new_tokens=16),
        SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=16),
        SamplingParams(temperature=1.2, top_k=20, max_new_tokens=16),
    ],
)
def test_sampled_logprobs_match_a_forward_pass(tiny_model, tokenizer, params):
    policy = graph_policy(tiny_model, tokenizer)
    prompts = prompts_for(policy, 4)
    requests = [GenerationRequest(p, key=f"e{i}", seed=i) for i, p in enumerate(prompts)]
    for prompt, generation in zip(prompts, policy.generate(requests, params), strict=True):
        expected = forward_logprobs(tiny_model, prompt, generation.token_ids, params.temperature)
        assert torch.allclose(torch.tensor(generation.logprobs), expected, atol=1e-4)


def test_a_seeded_row_samples_the_same_tokens_in_any_batch_or_slot(tiny_model, tokenizer):
    params = SamplingParams(temperature=1.0, max_new_tokens=12)
    prompts = prompts_for(graph_policy(tiny_model, tokenizer), 5)
    alone = graph_policy(tiny_model, tokenizer).generate(
        [GenerationRequest(prompts[2], seed=42)], params
    )
    batched = graph_policy(tiny_model, tokenizer).generate(
        [GenerationRequest(p, seed=42 if i == 2 else i) for i, p in enumerate(prompts)], params
    )
    assert alone[0].token_ids == batched[2].token_ids


def test_rows_with_other_limits_leave_and_the_rest_go_on(tiny_model, tokenizer):
    arena = HFPolicy(tiny_model, tokenizer, name="tiny", decode="arena")
    graph = graph_policy(tiny_model, tokenizer)
    params = SamplingParams(temperature=0.0, max_new_tokens=30)
    limits = [3, 17, 9, 30]
    requests = [
        GenerationRequest(p, max_new_tokens=n)
        for p, n in zip(prompts_for(arena, 4), limits, strict=True)
    ]
    expected, got = arena.generate(requests, params), graph.generate(requests, params)
    assert [len(g.token_ids) for g in got] == limits
    assert [g.token_ids for g in got] == [g.token_ids for g in expected]
    # the host read the row state once per SYNC_EVERY steps, not once per token
    assert graph.decoder.stats["host_syncs"] <= math.ceil(max(limits) / SYNC_EVERY) + 1


def test_an_idle_episode_keeps_its_cache_while_others_decode(tiny_model, tokenizer):
    """Slot 0 idles (its episode waits for the environment) while slot 1 decodes: the step
    runs over slots [0, 2) and must not write into slot 0's columns."""
    policy = graph_policy(tiny_model, tokenizer)
    params = SamplingParams(temperature=0.0, max_new_tokens=10)
    a, b = prompts_for(policy, 2, words=5)
    first = policy.generate([GenerationRequest(a, "A"), GenerationRequest(b, "B")], params)
    observation = tokenizer.encode("ok", add_special_tokens=False)
    b2 = b + first[1].token_ids + observation
    policy.generate([GenerationRequest(b2, "B")], SamplingParams(max_new_tokens=25))
    a2 = a + first[0].token_ids + observation
    reused = policy.generate([GenerationRequest(a2, "A")], params)[0]
    fresh = HFPolicy(tiny_model, tokenizer, name="tiny", decode="arena")
    assert reused.token_ids == fresh.generate([GenerationRequest(a2)], params)[0].token_ids


def test_slots_and_columns_grow_mid_session_and_stay_exact(tiny_model, tokenizer):
    """More rows than slots (chunks), prompts longer than the first capacity (the arena
    grows; step shapes are rebuilt for the new tensors)."""
    arena = HFPolicy(tiny_model, tokenizer, name="tiny", decode="arena")
    template = arena.template
    graph = GraphDecoder(tiny_model, template.stop_ids, 0, slots=2, capacity=64)
    params = SamplingParams(temperature=0.0, max_new_tokens=12)
    prompts = prompts_for(arena, 5, words=12)
    assert max(len(p) for p in prompts) > 64
    requests = [GenerationRequest(p) for p in prompts]
    expected = arena.generate(requests, params)
    got = graph.generate(requests, params)
    assert [g.token_ids for g in got] == [g.token_ids for g in expected]
    assert graph.arena.slots == 2 and graph.arena.capacity >= max(len(p) for p in prompts)
    assert graph.arena.version > 0


def test_a_row_that_joins_and_grows_the_arena_leaves_the_live_rows_exact(tiny_model, tokenizer):
    """A long prompt joins while a row decodes and outgrows the arena's columns: the cache
    and the row state grow under the live row, which goes on exactly as if alone."""
    arena = HFPolicy(tiny_model, tokenizer, name="tiny", decode="arena")
    graph = GraphDecoder(tiny_model, arena.template.stop_ids, 0, slots=4, capacity=64)
    params = SamplingParams(temperature=0.0, max_new_tokens=24)
    short, long = prompts_for(arena, 1)[0], prompts_for(arena, 5, words=12)[4]
    assert len(short) + 24 < 64 < len(long)
    requests = [GenerationRequest(short, "a"), GenerationRequest(long, "b", max_new_tokens=12)]
    trickle = Trickle(requests)
    graph.stream(trickle, params)
    assert graph.stats["joined_rows"] == 1 and graph.arena.version > 0
    expected = arena.generate(requests, params)
    assert [trickle.done[i].token_ids for i in range(2)] == [g.token_ids for g in expected]


@pytest.mark.parametrize(
    "device",
    [
        "cpu",
        pytest.param(
            "cuda",
            marks=pytest.mark.skipif(
                not torch.cuda.is_available(), reason="captures CUDA graphs: needs a GPU"
            ),
        ),
    ],
)
def test_keyed_episodes_go_on_after_the_arena_grows_between_turns(tiny_model, tokenizer, device):
    """Turn 2 outgrows the arena, so the captured steps of turn 1 are dropped and new ones
    captured. On an H200 this failed an allocator assert (a new capture into the released
    pool of the dropped graphs); the replies must stay those of the arena decoder."""
    model = copy.deepcopy(tiny_model).to(device)
    arena = HFPolicy(model, tokenizer, name="tiny", decode="arena")  # same device: same sums
    graph = GraphDecoder(model, arena.template.stop_ids, 0, slots=4, capacity=64)
    params = SamplingParams(temperature=0.0, max_new_tokens=12)
    observation = tokenizer.encode("observation " * 20, add_special_tokens=False)
    prompts = prompts_for(arena, 3)
    for _ in range(3):
        requests = [GenerationRequest(p, key=f"e{i}") for i, p in enumerate(prompts)]
        expected = arena.generate(requests, params)
        got = graph.generate(requests, params)
        assert [g.token_ids for g in got] == [g.token_ids for g in expected]
        prompts = [p + g.token_ids + observation for p, g in zip(prompts, got, strict=True)]
    assert graph.arena.version > 0  # the arena grew during the session
    if device == "cuda":
        assert graph.stats["graph_captures"] > 1 and graph.stats["graph_replays"] > 0


def test_bucket_sizes_are_powers_of_two_multiples_capped():
    assert [bucket(v, 1, 32) for v in (1, 2, 3, 17, 32, 40)] == [1, 2, 4, 32, 32, 32]
    assert [bucket(v, 256, 4096) for v in (1, 256, 257, 3000, 9000)] == [
        256,
        256,
        512,
        4096,
        4096,
    ]


def deep_tiny_model(tokenizer, layers=10):
    """More layers than dynamo's recompile limit (8): a compiled function per layer would
    fall back to eager from the 9th layer on. The head is scaled so that sampling is decided
    by the model, not by float rounding (compiled sums round differently)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(1)
    config = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=len(tokenizer),
    )
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # peaked next-token distributions, as a trained model has: over
        model.lm_head.weight.mul_(30)  # 49k near-equal tokens a sum's rounding picks the sample
    return model


def session(decoder, template_policy, tokenizer, params):
    """Two keyed turns that outgrow the arena, then a fresh batch of another size."""
    observation = tokenizer.encode("observation " * 10, add_special_tokens=False)
    prompts = prompts_for(template_policy, 5)
    replies = []
    for turn in range(2):
        requests = [GenerationRequest(p, key=f"e{i}", seed=turn + i) for i, p in enumerate(prompts)]
        got = decoder.generate(requests, params)
        replies += [(g.token_ids, g.logprobs) for g in got]
        prompts = [p + g.token_ids + observation for p, g in zip(prompts, got, strict=True)]
    fresh = [GenerationRequest(p, seed=9) for p in prompts[:3]]
    return replies + [(g.token_ids, g.logprobs) for g in decoder.generate(fresh, params)]


@pytest.mark.parametrize(
    ("backend", "draft_tokens"),
    [
        ("aot_eager", 0),  # dynamo's tracing and the functionalised arena writes, in seconds
        ("aot_eager", 4),  # the same with guessed tokens (the step and its acceptance)
        pytest.param("inductor", 0, marks=pytest.mark.slow),  # what a GPU runs (C++ here)
    ],
)
def test_the_compiled_step_samples_what_the_eager_step_samples(
    tokenizer, monkeypatch, backend, draft_tokens
):
    """On a GPU each layer of a step runs compiled (inductor fuses its ~57 ops); the compiled
    code must give the eager step's tokens and log-probs, through arena growth and batch-size
    changes, with one compiled layer for all layers (a few shape variants, not one a layer),
    with guessed tokens too (their acceptance runs compiled)."""
    from agenttrain.policy import graph_decoder

    real_compile = torch.compile
    monkeypatch.setattr(
        graph_decoder.torch,
        "compile",
        lambda function, **kwargs: real_compile(function, backend=backend, **kwargs),
    )
    model = deep_tiny_model(tokenizer)
    policy = HFPolicy(model, tokenizer, name="tiny", decode="arena")
    stops = policy.template.stop_ids
    params = SamplingParams(temperature=0.8, top_p=0.9, max_new_tokens=12)
    build = functools.partial(GraphDecoder, slots=8, capacity=64, draft_tokens=draft_tokens)
    eager = build(model, stops, 0, compile_step=False)
    expected = session(eager, policy, tokenizer, params)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = build(model, stops, 0, compile_step=True)
    got = session(compiled, policy, tokenizer, params)
    assert compiled.stats["compile_failures"] == 0 and compiled.arena.version > 0
    assert [tokens for tokens, _ in got] == [tokens for tokens, _ in expected]
    for (_, a), (_, b) in zip(got, expected, strict=True):
        assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < 1e-4
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    assert 2 <= graphs <= 6 + 4 * bool(draft_tokens), f"{graphs} compiled graphs for 10 layers"


def test_a_step_that_cannot_compile_decodes_eagerly_and_says_so(
    tiny_model, tokenizer, monkeypatch, caplog
):
    """A machine without a working compiler loses speed, not the run."""
    from agenttrain.policy import graph_decoder

    def broken_backend(graph, example_inputs):
        raise RuntimeError("no C compiler here")

    real_compile = torch.compile
    monkeypatch.setattr(
        graph_decoder.torch,
        "compile",
        lambda function, **kwargs: real_compile(function, backend=broken_backend, **kwargs),
    )
    policy = HFPolicy(tiny_model, tokenizer, name="tiny", decode="arena")
    params = SamplingParams(temperature=0.0, max_new_tokens=8)
    requests = [GenerationRequest(p) for p in prompts_for(policy, 3)]
    torch._dynamo.reset()
    decoder = GraphDecoder(tiny_model, policy.template.stop_ids, 0, compile_step=True)
    with caplog.at_level("WARNING"):
        got = decoder.generate(requests, params)
    assert [g.token_ids for g in got] == [g.token_ids for g in policy.generate(requests, params)]
    assert decoder.stats["compile_failures"] == 2  # the layer step and the sampling step
    assert "decoding eagerly" in caplog.text and "no C compiler here" in caplog.text


@pytest.mark.parametrize("top_k", [0, 3])
def test_the_gumbel_race_draws_from_the_softmax(top_k):
    """The graph path samples by a Gumbel-max race (it compiles on CUDA, the inverse CDF's
    49k-wide cumulative sum did not): its token frequencies must be the (truncated)
    temperature-scaled softmax, and its log-probs those of the untruncated one."""
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0, -3.0]])
    draws = 20000
    seeds = torch.full((draws,), 7)
    tokens, logprobs = race(logits.expand(draws, -1), 0.8, top_k, 1.0, seeds, torch.arange(draws))
    expected = torch.softmax(truncate(logits[0] / 0.8, top_k, 1.0), dim=-1)
    seen = torch.bincount(tokens, minlength=logits.shape[1]).double() / draws
    assert torch.allclose(seen, expected.double(), atol=0.012), (seen, expected)
    assert torch.allclose(logprobs, torch.log_softmax(logits[0] / 0.8, dim=-1)[tokens])
    again, _ = race(logits.expand(3, -1), 0.8, top_k, 1.0, seeds[:3], torch.tensor([4, 5, 6]))
    assert again.tolist() == tokens[4:7].tolist()  # a row's draw: its seed and step only
    other, _ = race(logits.expand(draws, -1), 0.8, top_k, 1.0, seeds + 1, torch.arange(draws))
    assert (other != tokens).float().mean() > 0.3  # another seed, other draws
