"""Conversations as token ids with an assistant-only loss mask, built like rollout episodes.

The same `ChatTemplate` calls the rollout engine makes: the prompt up to the first trained
turn, each assistant reply as its tokens plus the end-of-turn token (mask 1 when trained on),
each environment message as the template's user-turn delta (mask 0). So SFT trains on
exactly the token layout the policy later sees in its own episodes.
"""

from __future__ import annotations

from dataclasses import dataclass

from agenttrain.policy.chat import ChatTemplate
from agenttrain.sft.data import Conversation


@dataclass
class Example:
    ids: list[int]
    mask: list[int]
    """1 on tokens that carry loss (the trained assistant turns and their end-of-turn)."""
    source: str
    truncated: bool = False

    @property
    def trained_tokens(self) -> int:
        return sum(self.mask)


def tokenize(conversation: Conversation, template: ChatTemplate, max_length: int) -> Example | None:
    """Ids and mask of a conversation; None when truncation leaves nothing to train on."""
    messages, trainable = conversation.messages, conversation.trainable
    first = trainable.index(True)
    ids = template.prompt_ids(messages[:first])
    mask = [0] * len(ids)
    last = max(i for i, flag in enumerate(trainable) if flag)  # later user turns add nothing
    for index in range(first, last + 1):
        message = messages[index]
        if message["role"] == "assistant":
            content = template.encode(message["content"])
            ids += [*content, template.end_of_turn_id]
            trained = 1 if trainable[index] else 0
            # A reply cut off by the token limit never sampled its end-of-turn (RL masks it).
            end_trained = 0 if index in conversation.cut_off else trained
            mask += [trained] * len(content) + [end_trained]
        elif message["role"] == "user":
            turn = template.user_turn_ids(message["content"])
            ids += turn
            mask += [0] * len(turn)
        else:
            raise ValueError(f"{conversation.source}: a {message['role']} message after the start")
    truncated = len(ids) > max_length
    ids, mask = ids[:max_length], mask[:max_length]
    if not any(mask):
        return None
    return Example(ids, mask, conversation.source, truncated)


def reply_lengths(example: Example) -> list[int]:
    """Tokens in each trained reply, its end-of-turn included: what generating it takes."""
    lengths, run = [], 0
    for flag in [*example.mask, 0]:
        if flag:
            run += 1
        elif run:
            lengths.append(run)
            run = 0
    return lengths


def long_replies(examples: list[Example], limit: int) -> str | None:
    """A warning when trained replies do not fit in `limit` generated tokens, else None.

    A model that imitates a reply longer than its generation limit is cut off mid-thought,
    before its action: each such turn becomes a format error in evaluation and in RL.
    """
    lengths = [n for example in examples for n in reply_lengths(example)]
    longer = [n for n in lengths if n > limit]
    if not longer:
        return None
    return (
        f"{len(longer)} of {len(lengths)} trained replies are longer than the "
        f"{limit} tokens a generation may take (longest {max(longer)}, end-of-turn included): "
        "a model that imitates them is cut off before its action. Raise the limit "
        "(eval.max_new_tokens; GRPO's rollout.max_new_tokens) or shorten the replies."
    )
