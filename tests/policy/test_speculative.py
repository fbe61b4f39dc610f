"""Decode steps that check guessed tokens (speculative sampling with prompt-lookup drafts):
the tokens must come out as plain sampling draws them, and the cache must forget rejections."""

from __future__ import annotations

import itertools

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from agenttrain.policy import lookup as lookup_module
from agenttrain.policy.base import GenerationRequest, SamplingParams
from agenttrain.policy.decoder import LlamaFamilyDecoder
from agenttrain.policy.graph_decoder import GraphDecoder

VOCAB = 8
PROMPT = [1, 2, 3, 1, 2, 3, 1, 2, 4, 5, 1, 2]


@pytest.fixture(scope="module")
def small_vocab_model():
    """A random 2-layer Llama over 8 tokens: exact sequence probabilities can be enumerated."""
    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=VOCAB,
        max_position_embeddings=256,
        initializer_range=0.5,
    )
    return LlamaForCausalLM(config).eval()


@pytest.fixture
def arbitrary_guesses(monkeypatch):
    """Every guess is token 3, the likeliest one here, whatever the row holds: about half
    are accepted, and a rejected 3 must then be excluded from the draw at its position."""
    monkeypatch.setattr(lookup_module.PromptLookup, "draft", lambda self, count: [3] * count)


def exact_marginals(model, temperature: float, length: int) -> list[torch.Tensor]:
    """P(token at position i of the continuation of PROMPT), summed over all continuations."""
    sequences = list(itertools.product(range(VOCAB), repeat=length))
    ids = torch.tensor([PROMPT + list(s) for s in sequences])
    with torch.no_grad():
        logits = model(ids).logits[:, len(PROMPT) - 1 : -1] / temperature
    picked = ids[:, len(PROMPT) :, None]
    probs = torch.log_softmax(logits, -1).gather(-1, picked)[..., 0].sum(-1).exp()
    return [
        torch.zeros(VOCAB).index_add_(0, torch.tensor([s[i] for s in sequences]), probs)
        for i in range(length)
    ]


def sampled_marginals(decoder, params: SamplingParams, count: int) -> list[torch.Tensor]:
    requests = [GenerationRequest(PROMPT, seed=1000 + i) for i in range(count)]
    counts = torch.zeros(params.max_new_tokens, VOCAB)
    for generation in decoder.generate(requests, params):
        for position, token in enumerate(generation.token_ids):
            counts[position, token] += 1
    return list(counts / count)


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_guessed_tokens_leave_the_sampling_distribution_unchanged(
    small_vocab_model, arbitrary_guesses, temperature
):
    """Each guess is kept with the probability sampling would draw it, and a rejected one is
    excluded from the draw at its position: every position's tokens are distributed as plain
    sampling's (were a rejected 3 drawable again, position 2 would skew by ~0.15)."""
    params = SamplingParams(temperature=temperature, max_new_tokens=3)
    decoder = LlamaFamilyDecoder(small_vocab_model, frozenset({99}), 0, 32, draft_tokens=2)
    sampled = sampled_marginals(decoder, params, 4000)
    drafted, accepted = decoder.stats["drafted_tokens"], decoder.stats["accepted_tokens"]
    assert 0.1 * drafted < accepted < 0.9 * drafted  # both ways were taken, many times
    exact = exact_marginals(small_vocab_model, temperature, 3)
    for position in range(3):
        distance = 0.5 * (sampled[position] - exact[position]).abs().sum().item()
        assert distance < 0.03, (position, distance)


def test_greedy_decoding_with_guesses_gives_the_tokens_without(small_vocab_model):
    """Real prompt lookups: greedy decoding keeps a guess exactly when it is the argmax."""
    prompts = [PROMPT[i:] + PROMPT[:i] for i in range(4)]
    requests = [GenerationRequest(p, key=f"e{i}") for i, p in enumerate(prompts)]
    params = SamplingParams(temperature=0.0, max_new_tokens=30)
    outputs, accepted = {}, 0
    for draft_tokens in (0, 4):
        decoder = LlamaFamilyDecoder(
            small_vocab_model, frozenset({99}), 0, 32, draft_tokens=draft_tokens
        )
        outputs[draft_tokens] = decoder.generate(requests, params)
        accepted += decoder.stats["accepted_tokens"]
    assert accepted > 0
    for plain, guessed in zip(outputs[0], outputs[4], strict=True):
        assert guessed.token_ids == plain.token_ids
        assert torch.allclose(
            torch.tensor(guessed.logprobs), torch.tensor(plain.logprobs), atol=1e-5
        )


def test_a_turn_after_rejected_guesses_reuses_only_the_kept_cache(
    small_vocab_model, arbitrary_guesses
):
    """Rejected guesses were written into the row's cache; the next turn must extend what the
    row kept, so it samples what a fresh decoder samples from the whole conversation."""
    params = SamplingParams(temperature=1.0, max_new_tokens=6)
    decoder = LlamaFamilyDecoder(small_vocab_model, frozenset({99}), 0, 4, draft_tokens=3)
    first = decoder.generate([GenerationRequest(PROMPT, key="e", seed=1)], params)[0]
    assert decoder.stats["accepted_tokens"] < decoder.stats["drafted_tokens"]
    second_prompt = PROMPT + first.token_ids + [6, 7, 6]
    second = decoder.generate([GenerationRequest(second_prompt, key="e", seed=2)], params)[0]
    fresh = LlamaFamilyDecoder(small_vocab_model, frozenset({99}), 0, 4, draft_tokens=3)
    expected = fresh.generate([GenerationRequest(second_prompt, key="x", seed=2)], params)[0]
    assert second.token_ids == expected.token_ids
    assert torch.allclose(torch.tensor(second.logprobs), torch.tensor(expected.logprobs), atol=1e-5)


# -- the static-shape (GPU) step with guesses, run eagerly on CPU -----------------------------


@pytest.fixture
def arbitrary_device_guesses(monkeypatch):
    """`arbitrary_guesses` for the graph decoder, whose lookup runs on the device."""

    def threes(self, history, lengths, count):
        rows = history.shape[0]
        return torch.full((rows, count), 3), torch.ones(rows, count, dtype=torch.bool)

    monkeypatch.setattr(GraphDecoder, "_lookup", threes)


def graph_decoder(model, draft_tokens: int, slots: int = 32) -> GraphDecoder:
    return GraphDecoder(
        model, frozenset({99}), 0, slots, capacity=64, compile_step=False, draft_tokens=draft_tokens
    )


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_the_graph_step_keeps_the_sampling_distribution_with_guesses(
    small_vocab_model, arbitrary_device_guesses, temperature
):
    """The device-side acceptance (counter-based uniforms, the rejected guess excluded from
    the race at its position) leaves every position's tokens distributed as plain sampling's."""
    params = SamplingParams(temperature=temperature, max_new_tokens=3)
    decoder = graph_decoder(small_vocab_model, draft_tokens=2)
    sampled = sampled_marginals(decoder, params, 4000)
    drafted, accepted = decoder.stats["drafted_tokens"], decoder.stats["accepted_tokens"]
    assert 0.1 * drafted < accepted < 0.9 * drafted
    exact = exact_marginals(small_vocab_model, temperature, 3)
    for position in range(3):
        distance = 0.5 * (sampled[position] - exact[position]).abs().sum().item()
        assert distance < 0.03, (position, distance)


def test_the_device_lookup_guesses_what_prompt_lookup_guesses():
    """`GraphDecoder._lookup` over a batch of padded rows against `PromptLookup` row by row."""
    generator = torch.Generator().manual_seed(0)
    rows = [torch.randint(0, 4, (length,), generator=generator).tolist() for length in range(12)]
    rows += [[1, 2, 3, 1, 2, 3, 1, 2], [5, 6, 7, 5, 6], [9] * 7, [4, 4, 4, 1, 4, 4]]
    width = max(len(r) for r in rows) + 3
    history = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    lengths = torch.tensor([len(r) for r in rows])
    drafts, valid = GraphDecoder._lookup(None, history, lengths, 4)
    for row, row_drafts, row_valid in zip(rows, drafts.tolist(), valid.tolist(), strict=True):
        expected = lookup_module.PromptLookup(row).draft(4)
        assert [t for t, v in zip(row_drafts, row_valid, strict=True) if v] == expected, row
        assert row_valid == sorted(row_valid, reverse=True)  # real guesses lead


def test_the_graph_step_with_guesses_decodes_greedily_as_without(small_vocab_model):
    """Real device lookups, rows of other lengths and limits: greedy tokens and log-probs as
    the step without guesses gives them, with guesses kept."""
    prompts = [PROMPT[i:] + PROMPT[:i] for i in range(6)]
    requests = [
        GenerationRequest(p, key=f"e{i}", max_new_tokens=12 + 5 * i) for i, p in enumerate(prompts)
    ]
    params = SamplingParams(temperature=0.0, max_new_tokens=40)
    outputs = {}
    for draft_tokens in (0, 4):
        decoder = graph_decoder(small_vocab_model, draft_tokens)
        outputs[draft_tokens] = decoder.generate(requests, params)
    assert decoder.stats["accepted_tokens"] > 0
    for plain, guessed in zip(outputs[0], outputs[4], strict=True):
        assert guessed.token_ids == plain.token_ids
        assert guessed.finish_reason == plain.finish_reason
        assert torch.allclose(
            torch.tensor(guessed.logprobs), torch.tensor(plain.logprobs), atol=1e-5
        )


def test_a_graph_turn_after_rejected_guesses_reuses_only_the_kept_cache(
    small_vocab_model, arbitrary_device_guesses
):
    """Rejected guesses' keys/values lie past the row's length; the next turn of the episode
    samples what a fresh decoder samples from the whole conversation."""
    params = SamplingParams(temperature=1.0, max_new_tokens=6)
    decoder = graph_decoder(small_vocab_model, draft_tokens=3, slots=4)
    first = decoder.generate([GenerationRequest(PROMPT, key="e", seed=1)], params)[0]
    assert decoder.stats["accepted_tokens"] < decoder.stats["drafted_tokens"]
    second_prompt = PROMPT + first.token_ids + [6, 7, 6]
    second = decoder.generate([GenerationRequest(second_prompt, key="e", seed=2)], params)[0]
    fresh = graph_decoder(small_vocab_model, draft_tokens=3, slots=4)
    expected = fresh.generate([GenerationRequest(second_prompt, key="x", seed=2)], params)[0]
    assert second.token_ids == expected.token_ids
    assert torch.allclose(torch.tensor(second.logprobs), torch.tensor(expected.logprobs), atol=1e-5)


def test_a_seeded_row_samples_the_same_tokens_with_guesses_in_any_batch(small_vocab_model):
    """Acceptance draws from the row's seed and position only: a row's tokens do not depend
    on the rows beside it or its slot."""
    params = SamplingParams(temperature=1.0, max_new_tokens=20)
    alone = graph_decoder(small_vocab_model, 4).generate(
        [GenerationRequest(PROMPT, seed=7)], params
    )[0]
    crowd = [GenerationRequest([*PROMPT[i:], 5, 6], seed=100 + i) for i in range(5)]
    crowd.insert(3, GenerationRequest(PROMPT, seed=7))
    together = graph_decoder(small_vocab_model, 4).generate(crowd, params)[3]
    assert together.token_ids == alone.token_ids
    assert torch.allclose(torch.tensor(together.logprobs), torch.tensor(alone.logprobs))
