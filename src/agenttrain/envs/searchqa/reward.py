"""SearchQA's reply rules and exact-match reward, as AgentGym's searchqa server applies them.

The server acts on the FIRST `<search>` or `<answer>` element of the raw reply, but scores the
LAST `<answer>` element: 1 when, normalised, it equals one of the gold answers, else 0
(reference: agentgym.md section 1.7; its format-aware scorer adds nothing with the zero
weights the server passes it).
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable

FIRST_TAG = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL)
ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
ARTICLES = re.compile(r"\b(a|an|the)\b")
PUNCTUATION = str.maketrans("", "", string.punctuation)


def first_action(reply: str) -> tuple[str, str] | None:
    """("search" | "answer", its stripped content) of the reply's first element, or None."""
    match = FIRST_TAG.search(reply)
    return (match.group(1), match.group(2).strip()) if match else None


def last_answer(reply: str) -> str | None:
    answers = ANSWER.findall(reply)
    return answers[-1].strip() if answers else None


def normalize_answer(text: str) -> str:
    """Lower case, punctuation dropped, articles (a, an, the) dropped, spaces collapsed."""
    return " ".join(ARTICLES.sub(" ", text.lower().translate(PUNCTUATION)).split())


def exact_match(prediction: str, targets: Iterable[str]) -> bool:
    normalized = normalize_answer(prediction)
    return any(normalize_answer(target) == normalized for target in targets)


def answer_reward(reply: str, targets: Iterable[str]) -> float:
    """1.0 when the reply's last `<answer>` matches a target exactly (normalised), else 0.0."""
    answer = last_answer(reply)
    return 1.0 if answer is not None and exact_match(answer, targets) else 0.0
