"""Token-level view of a tokenizer's chat template, for token-in-token-out episodes.

An episode is grown by appending tokens: the model's sampled tokens exactly as sampled,
and for each environment turn the template's *delta* for one more user message (the text
the template puts after an assistant turn's end-of-turn token, the user message, and the
generation prompt). Deltas are computed by rendering conversations with placeholders, so
the episode's ids equal what the template would give for the whole transcript (tested),
without ever re-encoding what the model wrote.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any

from agenttrain.policy.base import PolicyError

_SENTINEL = "agenttrain-sentinel-7f3a"


class ChatTemplate:
    def __init__(self, tokenizer: Any, system_prompt: str | None = None) -> None:
        if not getattr(tokenizer, "chat_template", None):
            name = getattr(tokenizer, "name_or_path", type(tokenizer).__name__)
            raise PolicyError(
                f"tokenizer {name!r} has no chat template; agenttrain needs one to build "
                "multi-turn prompts (use an instruct/chat model, or set tokenizer.chat_template)"
            )
        self.tokenizer = tokenizer
        self.system_prompt = system_prompt

    def _messages(self, messages: Sequence[dict[str, str]]) -> list[dict[str, str]]:
        if self.system_prompt is None or (messages and messages[0]["role"] == "system"):
            return list(messages)
        return [{"role": "system", "content": self.system_prompt}, *messages]

    def render(self, messages: Sequence[dict[str, str]], add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            self._messages(messages), tokenize=False, add_generation_prompt=add_generation_prompt
        )

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def prompt_ids(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """Ids of a conversation ending with the generation prompt (the model's turn)."""
        return self.encode(self.render(messages, add_generation_prompt=True))

    @cached_property
    def _assistant_end(self) -> tuple[str, str]:
        """(end-of-turn text the model emits, template text that follows it)."""
        base = [{"role": "user", "content": "u"}, {"role": "assistant", "content": _SENTINEL}]
        text = self.render(base, add_generation_prompt=False)
        after = text[text.rindex(_SENTINEL) + len(_SENTINEL) :]
        ids = self.encode(after)
        if not ids:
            raise PolicyError("the chat template puts nothing after an assistant message")
        end_text = self.tokenizer.decode([ids[0]])
        return end_text, after[len(end_text) :]

    @cached_property
    def end_of_turn_id(self) -> int:
        """The token that ends an assistant turn (e.g. `<|im_end|>`); generation stops on it."""
        end_text, _ = self._assistant_end
        ids = self.encode(end_text)
        if len(ids) != 1:
            raise PolicyError(f"end of an assistant turn is not a single token: {end_text!r}")
        return ids[0]

    @cached_property
    def stop_ids(self) -> frozenset[int]:
        stops = {self.end_of_turn_id}
        if self.tokenizer.eos_token_id is not None:
            stops.add(int(self.tokenizer.eos_token_id))
        return frozenset(stops)

    def user_turn_ids(self, content: str) -> list[int]:
        """Tokens to append after an assistant turn that ended with its end-of-turn token."""
        base = [{"role": "user", "content": "u"}, {"role": "assistant", "content": _SENTINEL}]
        before = self.render(base, add_generation_prompt=False)
        after = self.render(
            [*base, {"role": "user", "content": content}], add_generation_prompt=True
        )
        if not after.startswith(before):
            raise PolicyError("the chat template is not prefix-monotone; cannot extend episodes")
        _, trailing = self._assistant_end
        return self.encode(trailing + after[len(before) :])

    def close_turn_ids(self) -> list[int]:
        """Tokens that close an assistant turn the model did not finish (cut off by length)."""
        return [self.end_of_turn_id]
