"""Draft tokens by prompt lookup: guess a row's next tokens from its own context.

An agent's replies repeat its context: thoughts follow the wording of earlier turns, actions
copy the environment's commands ("craft 4 oak planks using 1 oak log"). The tokens that
followed the latest earlier occurrence of the row's last n tokens are a cheap guess at what
comes next; the decoder checks the guess in one forward pass and keeps the part the model
itself would have sampled (speculative sampling, `policy/decoder.py`). Known as prompt lookup
decoding (Saxena, 2023) and as vLLM's n-gram speculator.
"""

from __future__ import annotations

from collections.abc import Iterable

LONGEST_MATCH = 3
"""n-grams of up to this many tokens are matched, the longest that occurred before first."""


class PromptLookup:
    """A row's tokens so far, indexed by every n-gram (n ≤ `LONGEST_MATCH`) they contain."""

    def __init__(self, tokens: Iterable[int] = ()) -> None:
        self.tokens: list[int] = []
        self._next_after: dict[tuple[int, ...], int] = {}
        """n-gram -> index of the token that followed its latest occurrence."""
        self.extend(tokens)

    def extend(self, tokens: Iterable[int]) -> None:
        for token in tokens:
            end = len(self.tokens)  # the n-grams ending here are now followed by `token`
            for n in range(1, min(LONGEST_MATCH, end) + 1):
                self._next_after[tuple(self.tokens[end - n : end])] = end
            self.tokens.append(token)

    def draft(self, count: int) -> list[int]:
        """Up to `count` tokens that followed the latest earlier occurrence of the longest
        suffix seen before; [] when none was."""
        if count <= 0:
            return []
        for n in range(min(LONGEST_MATCH, len(self.tokens)), 0, -1):
            start = self._next_after.get(tuple(self.tokens[-n:]))
            if start is not None:
                return self.tokens[start : start + count]
        return []
