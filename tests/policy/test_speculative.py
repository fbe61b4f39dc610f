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
