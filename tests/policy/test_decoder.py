"""The fast decoder against the model's own forward pass, on tiny random models."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from agenttrain.policy import decoder as decoder_module
from agenttrain.policy.base import GenerationRequest, SamplingParams
from agenttrain.policy.decoder import LlamaFamilyDecoder, common_prefix_length, supports
from agenttrain.policy.hf import HFPolicy
from agenttrain.policy.sampling import token_logprobs
from support import Trickle


def forward_logprobs(model, prompt, generated, temperature):
    ids = torch.tensor([list(prompt) + list(generated)])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1]
    return token_logprobs(logits, ids[0, len(prompt) :], temperature)


def prompts_for(policy, count):
    return [
        policy.template.prompt_ids([{"role": "user", "content": f"Task {i}: {'word ' * (3 * i)}"}])
        for i in range(count)
    ]


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_generation_logprobs_match_a_forward_pass(tiny_model, tokenizer, temperature):
    policy = HFPolicy(tiny_model, tokenizer, name="tiny")
    assert isinstance(policy.decoder, LlamaFamilyDecoder)
    prompts = prompts_for(policy, 4)
    params = SamplingParams(temperature=temperature, top_p=0.9, max_new_tokens=16)
    requests = [GenerationRequest(p, key=f"e{i}", seed=i) for i, p in enumerate(prompts)]
    for prompt, generation in zip(prompts, policy.generate(requests, params), strict=True):
        expected = forward_logprobs(tiny_model, prompt, generation.token_ids, temperature)
        assert torch.allclose(torch.tensor(generation.logprobs), expected, atol=1e-4)


def test_second_turn_reuses_the_cache_and_stays_exact(tiny_model, tokenizer):
    policy = HFPolicy(tiny_model, tokenizer, name="tiny")
    params = SamplingParams(max_new_tokens=12)
    prompts = prompts_for(policy, 3)
    first = policy.generate(
        [GenerationRequest(p, f"e{i}", seed=i) for i, p in enumerate(prompts)], params
    )
    turn2 = [
        p + g.token_ids + policy.template.user_turn_ids(f"observation {i}")
        for i, (p, g) in enumerate(zip(prompts, first, strict=True))
    ]
    cached = [policy.decoder.arena.length(policy.decoder.arena.slot_of[f"e{i}"]) for i in range(3)]
    second = policy.generate(
        [GenerationRequest(p, f"e{i}", seed=10 + i) for i, p in enumerate(turn2)], params
    )
    # The cache held each episode's whole first turn (all but the last sampled token).
    assert cached == [len(p) + len(g.token_ids) - 1 for p, g in zip(prompts, first, strict=True)]
    fresh = HFPolicy(tiny_model, tokenizer, name="tiny").generate(
        [GenerationRequest(p, f"x{i}", seed=10 + i) for i, p in enumerate(turn2)], params
    )
    for prompt, reused, recomputed in zip(turn2, second, fresh, strict=True):
        assert reused.token_ids == recomputed.token_ids
        expected = forward_logprobs(tiny_model, prompt, reused.token_ids, 1.0)
        assert torch.allclose(torch.tensor(reused.logprobs), expected, atol=1e-4)


def test_a_seeded_request_samples_the_same_tokens_in_any_batch(tiny_model, tokenizer):
    params = SamplingParams(max_new_tokens=10)
    prompts = prompts_for(HFPolicy(tiny_model, tokenizer, name="tiny"), 5)
    alone = HFPolicy(tiny_model, tokenizer, name="tiny").generate(
        [GenerationRequest(prompts[2], seed=42)], params
    )
    batched = HFPolicy(tiny_model, tokenizer, name="tiny").generate(
        [GenerationRequest(p, seed=42 if i == 2 else i) for i, p in enumerate(prompts)], params
    )
    assert alone[0].token_ids == batched[2].token_ids


def test_shared_prompt_prefixes_are_computed_once(tiny_model, tokenizer):
    policy = HFPolicy(tiny_model, tokenizer, name="tiny")
    prompt = prompts_for(policy, 1)[0]
    params = SamplingParams(max_new_tokens=4)
    requests = [GenerationRequest(prompt, f"g{i}", seed=i) for i in range(4)]  # a GRPO group
    generations = policy.generate(requests, params)
    for generation in generations:
        expected = forward_logprobs(tiny_model, prompt, generation.token_ids, 1.0)
        assert torch.allclose(torch.tensor(generation.logprobs), expected, atol=1e-4)


def test_generation_stops_at_the_end_of_a_turn_never_at_its_start(tiny_model, tokenizer):
    policy = HFPolicy(tiny_model, tokenizer, name="tiny")
    im_start, im_end = tokenizer.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"])
    assert im_end in policy.decoder.stop_ids
    assert im_start not in policy.decoder.stop_ids


@pytest.mark.parametrize("decode", ["arena", "graph"])
def test_a_freed_cache_gives_its_memory_back_and_fills_again(tiny_model, tokenizer, decode):
    policy = HFPolicy(tiny_model, tokenizer, name="tiny", decode=decode)
    requests = [GenerationRequest(p, f"e{i}", seed=i) for i, p in enumerate(prompts_for(policy, 3))]
    params = SamplingParams(max_new_tokens=6)
    first = policy.generate(requests, params)
    assert policy.decoder.arena.nbytes > 0
    policy.free_cache()
    assert policy.decoder.arena.nbytes == 0 and policy.decoder.arena.slot_of == {}
    again = policy.generate(requests, params)
    assert [g.token_ids for g in again] == [g.token_ids for g in first]
    assert policy.decoder.arena.nbytes > 0


@pytest.mark.parametrize("decode", ["arena", "graph"])
def test_generation_stops_at_a_stop_token_and_keeps_it(tiny_model, tokenizer, decode):
    policy = HFPolicy(tiny_model, tokenizer, name="tiny", decode=decode)
    prompt = prompts_for(policy, 1)[0]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=8)
    free = policy.generate([GenerationRequest(prompt)], greedy)[0]
    assert free.finish_reason == "length" and len(free.token_ids) == 8
    policy.decoder.stop_ids = frozenset({free.token_ids[2]})
    stopped = policy.generate([GenerationRequest(prompt)], greedy)[0]
    assert stopped.token_ids == free.token_ids[: free.token_ids.index(free.token_ids[2]) + 1]
    assert stopped.finish_reason == "stop"


def test_the_generic_decoder_agrees_with_the_fast_one(tiny_model, tokenizer):
    fast = HFPolicy(tiny_model, tokenizer, name="tiny")
    generic = HFPolicy(tiny_model, tokenizer, name="tiny", fast=False)
    params = SamplingParams(temperature=0.0, max_new_tokens=10)
    prompts = prompts_for(fast, 3)
    a = fast.generate([GenerationRequest(p) for p in prompts], params)
    b = generic.generate([GenerationRequest(p) for p in prompts], params)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]


def test_qwen2_style_attention_biases_are_wired_correctly(tokenizer):
    torch.manual_seed(1)
    config = Qwen2Config(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=len(tokenizer),
        initializer_range=0.2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
    )
    model = Qwen2ForCausalLM(config).eval()
    assert supports(model)
    policy = HFPolicy(model, tokenizer, name="tiny-qwen2")
    prompt = prompts_for(policy, 2)[1]
    [generation] = policy.generate(
        [GenerationRequest(prompt, seed=3)], SamplingParams(max_new_tokens=8)
    )
    expected = forward_logprobs(model, prompt, generation.token_ids, 1.0)
    assert torch.allclose(torch.tensor(generation.logprobs), expected, atol=1e-4)


def test_bf16_generation_copy_follows_weight_updates(tiny_model, tokenizer):
    policy = HFPolicy(tiny_model, tokenizer, name="tiny", inference_dtype="bfloat16")
    assert policy.inference_dtype == torch.bfloat16 and policy.generator_model is not tiny_model
    prompt = prompts_for(policy, 1)[0]
    params = SamplingParams(temperature=0.0, max_new_tokens=6)
    before = policy.generate([GenerationRequest(prompt, "k")], params)[0].token_ids
    with torch.no_grad():
        saved = tiny_model.lm_head.weight.clone()
        tiny_model.lm_head.weight.mul_(-1.0)  # a drastic "update"
    try:
        policy.sync_weights()
        after = policy.generate([GenerationRequest(prompt, "k")], params)[0].token_ids
    finally:
        with torch.no_grad():
            tiny_model.lm_head.weight.copy_(saved)
    assert before != after


def test_a_bf16_policy_keeps_bf16_keys_and_scores_as_its_models_forward(tiny_model, tokenizer):
    """The projections of a bf16 model produce bf16 keys/values: an fp32 cache held them in
    twice the memory, and its fp32 attention scored tokens ~1e-3 away from the model's own
    bf16 forward pass (what the trainer's bf16 recompute sees)."""
    model = copy.deepcopy(tiny_model).to(torch.bfloat16)
    policy = HFPolicy(model, tokenizer, name="tiny")
    prompts = long_prompts(policy, ["a", "b", "c", "d"])
    requests = [GenerationRequest(p, f"e{i}", seed=i) for i, p in enumerate(prompts)]
    generations = policy.generate(requests, SamplingParams(max_new_tokens=12))
    assert policy.decoder.arena.k[0].dtype == torch.bfloat16
    for prompt, generation in zip(prompts, generations, strict=True):
        expected = forward_logprobs(model, prompt, generation.token_ids, 1.0)
        assert torch.allclose(torch.tensor(generation.logprobs), expected.float(), atol=1e-4)


def test_a_policy_generates_in_its_models_dtype_unless_told(tiny_model, tokenizer):
    """A bf16 model (as loaded on a GPU) must not be decoded from a float32 copy by default:
    that silently tripled a GPU decode's cost."""
    model = copy.deepcopy(tiny_model).to(torch.bfloat16)
    policy = HFPolicy(model, tokenizer, name="tiny")
    assert policy.inference_dtype == torch.bfloat16 and policy.generator_model is model
    assert HFPolicy(tiny_model, tokenizer, name="tiny").inference_dtype == torch.float32
    told = HFPolicy(model, tokenizer, name="tiny", inference_dtype="float32")
    assert told.inference_dtype == torch.float32
    params = SamplingParams(temperature=0.0, max_new_tokens=4)
    [generation] = policy.generate([GenerationRequest(prompts_for(policy, 1)[0])], params)
    assert len(generation.token_ids) == 4


def test_unsupported_architectures_fall_back(tokenizer):
    config = LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        vocab_size=len(tokenizer),
    )
    model = LlamaForCausalLM(config)
    model.config.model_type = "gpt_neox"  # pretend: the fast path must not claim it
    assert not supports(model)


INSTRUCTIONS = "You are an agent. " + "Craft items from the recipes you are given. " * 12


def long_prompts(policy, tasks):
    """Prompts sharing a long instruction block, as an environment's prompts do."""
    return [
        policy.template.prompt_ids([{"role": "user", "content": f"{INSTRUCTIONS}Goal: {task}"}])
        for task in tasks
    ]


def test_a_group_prompt_runs_through_the_model_once(tiny_model, tokenizer):
    policy = HFPolicy(tiny_model, tokenizer, name="tiny")
    prompt = long_prompts(policy, ["craft a stick"])[0]
    params = SamplingParams(max_new_tokens=6)
    requests = [GenerationRequest(prompt, f"g{i}", seed=i) for i in range(4)]
    generations = policy.generate(requests, params)
    stats = policy.decoder.stats
    # The first row runs the prompt; the other three copy all of it but its last token.
    assert stats["prefill_tokens"] == len(prompt) + 3
    assert stats["copied_prefix_tokens"] == 3 * (len(prompt) - 1)
    assert stats["shared_attention_steps"] > 0
    for generation in generations:
        expected = forward_logprobs(tiny_model, prompt, generation.token_ids, 1.0)
        assert torch.allclose(torch.tensor(generation.logprobs), expected, atol=1e-4)


def test_tasks_sharing_instructions_stay_exact_over_two_turns(tiny_model, tokenizer):
    policy = HFPolicy(tiny_model, tokenizer, name="tiny")
    prompts = long_prompts(policy, ["craft a stick", "craft a torch", "get 2 planks"])
    params = SamplingParams(temperature=0.8, max_new_tokens=8)
    first = policy.generate(
        [GenerationRequest(p, f"e{i}", seed=i) for i, p in enumerate(prompts)], params
    )
    shared = common_prefix_length(prompts[0], prompts[1])
    assert policy.decoder.stats["prefill_tokens"] < sum(map(len, prompts)) - shared
    turn2 = [
        p + g.token_ids + policy.template.user_turn_ids(f"Observation {i}: nothing happens.")
        for i, (p, g) in enumerate(zip(prompts, first, strict=True))
    ]
    second = policy.generate(
        [GenerationRequest(p, f"e{i}", seed=10 + i) for i, p in enumerate(turn2)], params
    )
    for prompt, generation in [*zip(prompts, first, strict=True), *zip(turn2, second, strict=True)]:
        expected = forward_logprobs(tiny_model, prompt, generation.token_ids, 0.8)
        assert torch.allclose(torch.tensor(generation.logprobs), expected, atol=1e-4)


def test_shared_prefix_attention_samples_what_plain_attention_samples(
    tiny_model, tokenizer, monkeypatch
):
    prompts = long_prompts(HFPolicy(tiny_model, tokenizer, name="tiny"), ["a", "b", "c", "d"])
    params = SamplingParams(max_new_tokens=12)
    requests = [GenerationRequest(p, seed=i) for i, p in enumerate(prompts)]
    split = HFPolicy(tiny_model, tokenizer, name="tiny")
    split_generations = split.generate(requests, params)
    monkeypatch.setattr(decoder_module, "MIN_SHARED_ATTENTION", 10**9)  # whole-row attention
    plain = HFPolicy(tiny_model, tokenizer, name="tiny")
    plain_generations = plain.generate(requests, params)
    for a, b in zip(split_generations, plain_generations, strict=True):
        assert a.token_ids == b.token_ids
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)
    assert split.decoder.stats["shared_attention_steps"] > 0
    assert plain.decoder.stats["shared_attention_steps"] == 0


@pytest.mark.parametrize("decode", ["arena", "graph"])
@pytest.mark.parametrize("budget", [10_000, 48])
def test_one_call_prefill_of_all_rows_matches_per_row_prefill(
    tiny_model, tokenizer, decode, budget
):
    """GPUs prefill a pass's rows in one padded attention call (`batched_rows`). Forced on here,
    over two turns of rows of other lengths (some sharing instructions), with a budget small
    enough (48) that long rows run in pieces across passes: the same tokens and log-probs as
    the per-row calls, and both those of the model's own forward pass."""

    def policy(batched):
        p = HFPolicy(tiny_model, tokenizer, name="tiny", decode=decode)
        p.decoder.batched_rows = batched
        p.decoder.prefill_tokens = budget
        return p

    one_call, per_row = policy(True), policy(False)
    prompts = [*long_prompts(per_row, ["craft a stick", "get 2 planks"]), *prompts_for(per_row, 3)]
    params = SamplingParams(temperature=0.8, max_new_tokens=8)
    for turn in range(2):
        requests = [
            GenerationRequest(p, f"e{i}", seed=turn * 10 + i) for i, p in enumerate(prompts)
        ]
        if turn == 1:  # episodes come back in another order: their slots are not a range
            requests.reverse()
            prompts.reverse()
        got, expected = one_call.generate(requests, params), per_row.generate(requests, params)
        for prompt, a, b in zip(prompts, got, expected, strict=True):
            assert a.token_ids == b.token_ids
            assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)
            reference = forward_logprobs(tiny_model, prompt, a.token_ids, 0.8)
            assert torch.allclose(torch.tensor(a.logprobs), reference, atol=1e-4)
        observation = per_row.template.user_turn_ids("Observation: nothing happens.")
        prompts = [p + g.token_ids + observation for p, g in zip(prompts, got, strict=True)]
    assert one_call.decoder.stats["prefill_tokens"] == per_row.decoder.stats["prefill_tokens"]
    assert one_call.decoder.stats["copied_prefix_tokens"] > 0  # shared instructions: one copy


def test_a_padded_prefill_pass_stays_within_its_budget(tiny_model, tokenizer):
    """Counted as rows x longest row: a pass of one-call rows never pads past the budget."""
    decoder = HFPolicy(tiny_model, tokenizer, name="tiny").decoder
    decoder.batched_rows, decoder.prefill_tokens = True, 40

    class Item:
        def __init__(self, n):
            self.pending = list(range(n))

    work = [Item(n) for n in (30, 5, 12, 60)]
    batch = decoder._next_pass(work, [0, 1, 2, 3])
    assert [(i, len(t)) for i, t in batch] == [(0, 30)]  # a second row would pad to 2 x 30
    work[0].pending = []
    batch = decoder._next_pass(work, [0, 1, 2, 3])
    assert [(i, len(t)) for i, t in batch] == [(1, 5), (2, 12), (3, 13)]  # 3 x 13 <= 40
    assert len(batch) * max(len(t) for _, t in batch) <= 40


def test_each_fresh_row_copies_from_the_earlier_row_sharing_the_longest_prefix(
    tiny_model, tokenizer
):
    """Leaders found by the all-pairs comparison equal a token-by-token search: groups of
    equal prompts, prompts that are prefixes of others, shared instructions, short rows."""
    decoder = HFPolicy(tiny_model, tokenizer, name="tiny").decoder
    rng = torch.Generator().manual_seed(0)
    base = torch.randint(0, 50, (40,), generator=rng).tolist()
    prompts = [base, base, base[:30], [*base[:30], 7, 8, 9], base[:5], [1, *base], base[:20]]
    prompts += [
        base[: int(n)] + torch.randint(0, 50, (6,), generator=rng).tolist() for n in (25, 33, 17)
    ]

    class Item:
        def __init__(self, prompt, slot):
            self.prompt, self.pending, self.slot = prompt, prompt, slot

    decoder.arena.acquire(None, set())
    work = [Item(p, 0) for p in prompts]  # slot 0 holds nothing: every row is fresh

    def reference(index):
        best, best_length = None, decoder_module.MIN_SHARED_PREFIX - 1
        if len(prompts[index]) <= decoder_module.MIN_SHARED_PREFIX:
            return None
        for earlier in range(index):
            length = min(
                common_prefix_length(prompts[earlier], prompts[index]), len(prompts[index]) - 1
            )
            if length > best_length:
                best, best_length = earlier, length
        return None if best is None else (best, best_length)

    expected = {i: reference(i) for i in range(len(prompts)) if reference(i) is not None}
    assert decoder._prompt_leaders(work) == expected
    assert expected[1] == (0, 39) and expected[3] == (0, 30) and 5 not in expected


@pytest.mark.parametrize("decode", ["arena", "graph"])
@pytest.mark.parametrize("slots", [32, 2])
def test_rows_that_join_mid_decode_sample_what_a_fixed_batch_samples(
    tiny_model, tokenizer, slots, decode
):
    """Continuous batching changes when a row runs, never what it samples: a seeded row
    gets the same tokens and log-probs as in a fixed batch, exact against a forward pass;
    with fewer slots than requests the rest wait for rows to leave. The graph decoder looks
    for arrivals every 8 steps (the arena decoder every 4): its rows run longer."""
    policy = HFPolicy(tiny_model, tokenizer, name="tiny", cache_slots=slots, decode=decode)
    prompts = prompts_for(policy, 5)
    lengths = [5, 14, 9, 20, 7] if decode == "arena" else [12, 30, 18, 40, 14]
    requests = [
        GenerationRequest(p, key=f"e{i}", max_new_tokens=n, seed=i)
        for i, (p, n) in enumerate(zip(prompts, lengths, strict=True))
    ]
    params = SamplingParams(temperature=1.0, max_new_tokens=32)
    trickle = Trickle(requests)
    policy.generate_stream(trickle, params)
    fixed = HFPolicy(tiny_model, tokenizer, name="tiny", decode=decode).generate(requests, params)
    assert sorted(trickle.done) == list(range(5))
    if slots > 2:
        assert policy.decoder.stats["joined_rows"] >= 3
    for index, expected in enumerate(fixed):
        got = trickle.done[index]
        assert len(got.token_ids) == lengths[index] and got.finish_reason == "length"
        assert got.token_ids == expected.token_ids
        assert torch.allclose(
            torch.tensor(got.logprobs), torch.tensor(expected.logprobs), atol=1e-5
        )
        exact = forward_logprobs(tiny_model, prompts[index], got.token_ids, 1.0)
        assert torch.allclose(torch.tensor(got.logprobs), exact, atol=1e-4)


@pytest.mark.parametrize("decode", ["arena", "graph"])
def test_a_second_turn_that_joins_mid_decode_reuses_its_episode_cache(
    tiny_model, tokenizer, decode
):
    policy = HFPolicy(tiny_model, tokenizer, name="tiny", decode=decode)
    params = SamplingParams(max_new_tokens=6)
    prompts = [prompts_for(policy, 1)[0], list(range(100, 130))]  # nothing shared
    first = policy.generate([GenerationRequest(prompts[0], "a", seed=1)], params)[0]
    turn2 = prompts[0] + first.token_ids + policy.template.user_turn_ids("observation")
    stats = policy.decoder.stats
    before = stats["prefill_tokens"]
    trickle = Trickle(
        [
            GenerationRequest(prompts[1], "b", max_new_tokens=20, seed=2),
            GenerationRequest(turn2, "a", max_new_tokens=6, seed=3),
        ]
    )
    policy.generate_stream(trickle, params)
    assert stats["joined_rows"] == 1
    # b's prompt ran whole; episode a ran only its new tokens: the observation and the last
    # token it sampled in turn 1
    new_tokens = len(turn2) - (len(prompts[0]) + len(first.token_ids) - 1)
    assert stats["prefill_tokens"] - before == len(prompts[1]) + new_tokens
    exact = forward_logprobs(tiny_model, turn2, trickle.done[1].token_ids, 1.0)
    assert torch.allclose(torch.tensor(trickle.done[1].logprobs), exact, atol=1e-4)


def test_both_llama_decoders_stream_and_the_generic_one_says_it_cannot(tiny_model, tokenizer):
    assert HFPolicy(tiny_model, tokenizer, name="tiny").streams
    assert HFPolicy(tiny_model, tokenizer, name="tiny", decode="graph").streams
    generic = HFPolicy(tiny_model, tokenizer, name="tiny", fast=False)
    assert not generic.streams
    with pytest.raises(TypeError, match="fixed batches"):
        generic.generate_stream(Trickle([]), SamplingParams())


@pytest.mark.parametrize("decode", ["arena", "graph"])
def test_a_stream_records_no_autograd_graph(tiny_model, tokenizer, decode):
    """Streaming runs the model like `generate`, without autograd: a cache that recorded
    its writes would keep every step's activations alive for as long as the episode."""
    policy = HFPolicy(tiny_model, tokenizer, name="tiny", decode=decode)
    assert any(p.requires_grad for p in tiny_model.parameters())
    requests = [GenerationRequest(p, f"e{i}", seed=i) for i, p in enumerate(prompts_for(policy, 3))]
    trickle = Trickle(requests)
    policy.generate_stream(trickle, SamplingParams(max_new_tokens=10))
    assert sorted(trickle.done) == [0, 1, 2]
    cache = policy.decoder.arena
    assert not any(t.requires_grad for t in [*cache.k, *cache.v])
