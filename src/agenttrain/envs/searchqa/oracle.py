"""SearchQA's expert: search with the question, then answer with the gold answer.

It reads the question from the first observation and looks it up in the question sets this
process has read (the bundled one, the configured one, any an environment here was given),
so it plays through a server as well, as long as this side knows the questions.
"""

from __future__ import annotations

from agenttrain.envs.actions import Oracle, PlannedAction
from agenttrain.envs.searchqa.questions import (
    Question,
    configured_questions,
    known_sets,
    question_set,
)

MARKER = "\n\n Question: "


class UnknownQuestion(LookupError):
    """The oracle has no gold answer for the question it was shown."""


def question_of(observation: str) -> str:
    if MARKER not in observation:
        raise UnknownQuestion(f"no question in observation: {observation[-200:]!r}")
    return observation.rsplit(MARKER, 1)[1].strip()


def find_question(text: str) -> Question:
    question_set(configured_questions())  # the configured set is always known
    for questions in known_sets():
        for question in questions.questions:
            if question.question.strip() == text:
                return question
    raise UnknownQuestion(f"the SearchQA oracle knows no gold answer for {text!r}")


def plan(observation: str) -> list[PlannedAction]:
    question = find_question(question_of(observation))
    source = f"passage {question.gold}" if question.gold else "the search results"
    return [
        PlannedAction(
            "I do not know this yet, so I search for it.",
            f"<search>{question.question}</search>",
        ),
        PlannedAction(f"The answer is in {source}.", f"<answer>{question.answers[0]}</answer>"),
    ]


ORACLE = Oracle(task_marker=MARKER, plan=plan)
