"""SearchQA in-process: AgentGym's searchqa environment over a local BM25 retriever.

Reference: agentgym.md section 1.7 and AgentGym's `agentenv-searchqa` server. The first
observation is the server's instructions and the question; a reply's first `<search>q</search>`
answers the top 3 passages as `<information>Doc 1(Title: t) text ...</information>`; its
first `<answer>` ends the episode with reward 1 when the last `<answer>` matches a gold answer
exactly (normalised), else says so with reward 0 and play goes on; a reply with neither tag
gets the server's invalid-format message. Retrieval is BM25 (SQLite FTS5) instead of E5 over
wiki-18, so the environment runs on any machine with the corpus it is given.
"""

from __future__ import annotations

import os
from dataclasses import replace

from agenttrain.envs.agentgym import SEARCHQA
from agenttrain.envs.base import EnvironmentNotReset, LocalEnvironment, Observation, StepResult
from agenttrain.envs.searchqa.corpus import Bm25Index, CorpusError, Passage, index_for
from agenttrain.envs.searchqa.oracle import ORACLE
from agenttrain.envs.searchqa.questions import (
    Question,
    QuestionSet,
    configured_corpus,
    configured_questions,
    question_set,
)
from agenttrain.envs.searchqa.reward import answer_reward, first_action

TOP_K = 3
"""Passages per search (AgentGym's server asks its retriever for 3)."""

INSTRUCTIONS = (
    "You must reason inside <think>...</think> first. If you do not have enough knowledge, "
    "issue a <search>...</search> and then STOP. Do not generate <information> or <answer> "
    "yet. Wait for external input wrapped in <information>...</information>. After receiving "
    "information, reason again in <think>. If confident, output your final answer in "
    "<answer>...</answer>. Do not output <answer> before receiving <information> unless you "
    "are fully confident. If you find no further external knowledge needed, you can directly "
    "provide the answer inside <answer> and </answer>, without detailed illustrations. For "
    "example, <answer> Beijing </answer>. Follow this process every time."
)
"""The server's first observation, before the question (AgentGym's text, verbatim)."""

CORRECT = "Congratulations! You have answered the question correctly."
INCORRECT = "Sorry, your answer is incorrect. Please try again."
INVALID = (
    "Your previous action is invalid. If you want to search, you should put the query between "
    "<search> and </search>. If you want to give the final answer, you should put the answer "
    "between <answer> and </answer>. Please try again."
)


def first_observation(question: str) -> str:
    """What AgentGym's server answers to a reset (note its space before `Question:`)."""
    return f"{INSTRUCTIONS}\n\n Question: {question.strip()}"


def information(passages: list[Passage]) -> str:
    """Search results as AgentGym's server writes them."""
    docs = "".join(f"Doc {n}(Title: {p.title}) {p.text}\n" for n, p in enumerate(passages, 1))
    return f"<information>{docs.strip()}</information>"


AGENTGYM_SPLITS = {f"agentgym_{name}": ids for name, ids in SEARCHQA.splits().items()}
"""The task ids of AgentGym's own server (its wiki-18 question sets), for `--server` runs."""


def splits() -> dict[str, tuple[int, ...]]:
    """The configured question file's splits, plus AgentGym's server's id ranges."""
    return {**question_set(configured_questions()).splits(), **AGENTGYM_SPLITS}


def _task_count() -> int | None:
    try:
        return len(question_set(configured_questions()))
    except CorpusError:
        return None  # reported when an environment is built; `agenttrain envs` still lists it


SPEC = replace(
    SEARCHQA,
    description="Search-R1 style question answering: <search> a BM25 index of a local corpus, "
    "<answer> by exact match (bundled: 300 invented passages, 420 questions).",
    split_loader=splits,
    num_tasks=_task_count(),
    requirements="pure Python: BM25 (SQLite FTS5) over a JSONL corpus; "
    "AgentGym's server for wiki-18 with E5",
    oracle=ORACLE,
)


class SearchQAEnv(LocalEnvironment):
    """One question at a time, answered by searching `corpus` (JSONL passages).

    `corpus`/`questions` default to `$AGENTTRAIN_SEARCHQA_CORPUS`/`$AGENTTRAIN_SEARCHQA_QUESTIONS`,
    then to the bundled Ostmere set. Both files are read once per process."""

    spec = SPEC

    def __init__(
        self,
        corpus: str | os.PathLike[str] | None = None,
        questions: str | os.PathLike[str] | None = None,
        top_k: int = TOP_K,
    ) -> None:
        super().__init__()
        self.index: Bm25Index = index_for(configured_corpus(corpus))
        self.questions: QuestionSet = question_set(configured_questions(questions))
        self.top_k = top_k
        self._check_gold_passages()
        self._question: Question | None = None

    def _check_gold_passages(self) -> None:
        """A question whose gold passage is not in the corpus means the two files do not belong
        together (a corpus given without its questions): refuse it before any episode."""
        missing = [q for q in self.questions.questions if q.gold and q.gold not in self.index.by_id]
        if missing:
            raise CorpusError(
                f"{len(missing)} question(s) of {self.questions.path} name a gold passage that "
                f"is not in the corpus (first: task {missing[0].task_id}, gold "
                f"{missing[0].gold!r}); give the corpus and the questions that go with it"
            )

    def reset_sync(self, task_id: int) -> Observation:
        self._question = self.questions.get(task_id)
        return Observation(
            first_observation(self._question.question),
            {"task_id": task_id, "split": self._question.split},
        )

    def step_sync(self, action: str) -> StepResult:
        if self._question is None:
            raise EnvironmentNotReset("SearchQA: call reset(task_id) before step()")
        chosen = first_action(action)
        if chosen is None:
            return StepResult(INVALID, 0.0, False)
        kind, content = chosen
        if kind == "search":
            return StepResult(information(self.index.search(content, self.top_k)), 0.0, False)
        reward = answer_reward(action, self._question.answers)
        return StepResult(CORRECT if reward == 1.0 else INCORRECT, reward, reward == 1.0)
