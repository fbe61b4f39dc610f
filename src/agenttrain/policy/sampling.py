"""Turning logits into sampled tokens and their log-probabilities.

The recorded log-probability is that of the sampled token under the temperature-scaled
distribution before top-k/top-p truncation: what verl recomputes for the PPO ratio
(`logits / temperature`, then log-softmax), so old and new log-probs are comparable.
"""

from __future__ import annotations

import torch

from agenttrain.policy.base import SamplingParams


def truncate(scaled: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Set logits outside the top-k / nucleus to -inf (rows of a [B, V] tensor)."""
    if top_k and top_k < scaled.shape[-1]:
        kth = torch.topk(scaled, top_k, dim=-1).values[..., -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(scaled, descending=True, dim=-1)
        probs = torch.softmax(sorted_logits, dim=-1)
        beyond = probs.cumsum(dim=-1) - probs > top_p  # keeps the token that crosses p
        sorted_logits = sorted_logits.masked_fill(beyond, float("-inf"))
        scaled = torch.full_like(scaled, float("-inf")).scatter(-1, order, sorted_logits)
    return scaled


def sample(
    logits: torch.Tensor,
    params: SamplingParams,
    generators: list[torch.Generator | None],
    exclude: list[int | None] | None = None,
) -> tuple[list[int], list[float]]:
    """One token per row of `logits` [B, V] (float32), with its log-probability; a row's
    `exclude` token (a rejected draft, `draft_odds`) is never drawn."""
    if params.temperature == 0:
        uniforms = None
    else:
        # One uniform per row from that row's own generator, so a row's token does not depend
        # on the other rows (torch.multinomial per row cost ~1 ms each).
        uniforms = torch.cat(
            [torch.rand(1, generator=generator, device=logits.device) for generator in generators]
        )
    excluded = None
    if exclude is not None and any(token is not None for token in exclude):
        excluded = torch.tensor([-1 if t is None else t for t in exclude], device=logits.device)
    tokens, logprobs = choose(
        logits, params.temperature, params.top_k, params.top_p, uniforms, excluded
    )
    return tokens.tolist(), logprobs.tolist()


def choose(
    logits: torch.Tensor,
    temperature: float,
    top_k: int,
    top_p: float,
    uniforms: torch.Tensor | None,
    exclude: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens [B] and their log-probabilities [B] from logits [B, V], on the logits' device.

    Inverse-CDF sampling with one given uniform per row (None for greedy, temperature 0): no
    host synchronisation, so it can run inside a captured CUDA graph. `exclude` [B] (-1: none)
    takes one token out of a row's sampling distribution after truncation, the rest
    renormalised: what speculative sampling draws from after rejecting that token. The
    log-probability stays that of the full distribution.
    """
    logits = logits.float()
    if temperature == 0:
        chosen = logits if exclude is None else _without(logits, exclude, float("-inf"))
        tokens = chosen.argmax(dim=-1)
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, tokens[:, None])[:, 0]
        return tokens, logprobs
    assert uniforms is not None
    scaled = logits / temperature
    logprobs_all = torch.log_softmax(scaled, dim=-1)
    probs = torch.softmax(truncate(scaled, top_k, top_p), dim=-1)
    if exclude is not None:
        probs = _without(probs, exclude, 0.0)
    cdf = probs.cumsum(dim=-1)
    target = (uniforms.to(cdf.dtype) * cdf[:, -1])[:, None]
    chosen = torch.searchsorted(cdf, target, right=True).clamp(max=cdf.shape[-1] - 1)
    return chosen[:, 0], logprobs_all.gather(-1, chosen)[:, 0]


def _without(values: torch.Tensor, exclude: torch.Tensor, fill: float) -> torch.Tensor:
    """`values` [B, V] with column exclude[b] of row b set to `fill` (rows with -1 as they are).
    A comparison, not an index: fixed shapes and no host sync, so a captured graph runs it."""
    columns = torch.arange(values.shape[-1], device=values.device)
    return values.masked_fill(columns[None, :] == exclude[:, None], fill)


def draft_odds(
    logits: torch.Tensor, drafts: torch.Tensor, params: SamplingParams
) -> tuple[torch.Tensor, torch.Tensor]:
    """For draft tokens [M] and the logits [M, V] at their positions: the probability that
    sampling draws each one (greedy: 1 for the argmax, else 0) and its log-probability.

    Speculative sampling with a single guessed token keeps it with exactly that probability
    and otherwise draws from the distribution without it (`choose`'s `exclude`), which
    leaves every row's tokens distributed as plain sampling's."""
    return guess_odds(logits, drafts, params.temperature, params.top_k, params.top_p)


def guess_odds(
    logits: torch.Tensor, drafts: torch.Tensor, temperature: float, top_k: int, top_p: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """`draft_odds` with the sampling settings as plain values (a compiled step's arguments)."""
    logits = logits.float()
    picked = drafts[:, None]
    if temperature == 0:
        odds = (logits.argmax(dim=-1) == drafts).float()
        return odds, torch.log_softmax(logits, dim=-1).gather(-1, picked)[:, 0]
    scaled = logits / temperature
    probs = torch.softmax(truncate(scaled, top_k, top_p), dim=-1)
    logprobs = torch.log_softmax(scaled, dim=-1)
    return probs.gather(-1, picked)[:, 0], logprobs.gather(-1, picked)[:, 0]


_GOLDEN = 0x9E3779B97F4A7C15 - (1 << 64)
_MIX1 = 0xBF58476D1CE4E5B9 - (1 << 64)
_MIX2 = 0x94D049BB133111EB - (1 << 64)


def _shift(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical (not arithmetic) right shift of int64 values."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def counter_bits(seeds: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    """64 random bits (as int64) per (seed, counter) pair of int64 tensors: SplitMix64."""
    z = seeds + (counters + 1) * _GOLDEN
    z = (z ^ _shift(z, 30)) * _MIX1
    z = (z ^ _shift(z, 27)) * _MIX2
    return z ^ _shift(z, 31)


def _uniforms(keys: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    """Uniforms in (0, 1), never 0 or 1, from 24 of the (key, counter) pairs' random bits
    (exact in float32); keys and counters broadcast."""
    bits = _shift(counter_bits(keys, counters), 40)
    return (bits.float() + 0.5) * (1.0 / (1 << 24))


def counter_uniforms(seeds: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """One uniform per (row seed, step) [B, ...], from another stream than `race`'s noise:
    what a graph-captured step accepts guessed tokens with (`draft_odds`)."""
    keys = counter_bits(seeds, torch.full_like(seeds, -2))  # race keys its rows with 0
    return _uniforms(keys.view(-1, *[1] * (steps.dim() - 1)), steps)


def race(
    logits: torch.Tensor,
    temperature: float,
    top_k: int,
    top_p: float,
    seeds: torch.Tensor,
    steps: torch.Tensor,
    exclude: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`choose`'s tokens and log-probabilities, drawn by the Gumbel-max race instead of the
    inverse CDF: argmax over the vocabulary of (truncated logit + Gumbel noise), the noise
    from each row's seed and step and the token's index. `exclude` as in `choose`.

    Why: a cumulative sum over a 49k vocabulary did not compile on CUDA (inductor's scan
    codegen failed), so the sampling step ran eagerly; a race is elementwise work and one
    argmax, which the compiler fuses. Same distribution, other tokens than `choose` draws.
    """
    logits = logits.float()
    if temperature == 0:
        return choose(logits, 0.0, top_k, top_p, None, exclude)
    scaled = logits / temperature
    logprobs_all = torch.log_softmax(scaled, dim=-1)
    vocab = scaled.shape[-1]
    rows = counter_bits(seeds, torch.zeros_like(seeds))  # decorrelates nearby seeds
    index = steps[:, None] * vocab + torch.arange(vocab, device=scaled.device)[None, :]
    noise = -torch.log(-torch.log(_uniforms(rows[:, None], index)))
    racing = truncate(scaled, top_k, top_p)
    if exclude is not None:
        racing = _without(racing, exclude, float("-inf"))
    chosen = (racing + noise).argmax(dim=-1, keepdim=True)
    return chosen[:, 0], logprobs_all.gather(-1, chosen)[:, 0]


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float) -> torch.Tensor:
    """Log-probabilities of `tokens` under `logits` scaled like sampling did (for checks and
    for training's recomputation): [..., V] logits, [...] tokens."""
    scaled = logits.float() / (temperature if temperature > 0 else 1.0)
    return torch.log_softmax(scaled, dim=-1).gather(-1, tokens[..., None])[..., 0]
