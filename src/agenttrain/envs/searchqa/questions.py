"""SearchQA's questions: a JSONL file, one question a line, task id = its position.

`{"question": str, "answers": [str, ...], "split": "train" | "test" | ..., "gold": str}`;
`split` and `gold` (the id of the passage that answers it) are optional. A question with a
`split` is in that named split; `gold` lets a test check retrieval and the oracle cite it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from agenttrain.envs.searchqa.corpus import CorpusError, read_jsonl, text_field

CORPUS_ENV = "AGENTTRAIN_SEARCHQA_CORPUS"
QUESTIONS_ENV = "AGENTTRAIN_SEARCHQA_QUESTIONS"
BUNDLED_CORPUS = Path(__file__).with_name("corpus.jsonl")
BUNDLED_QUESTIONS = Path(__file__).with_name("questions.jsonl")
"""The invented Ostmere corpus and its questions (written by `bundled.py`)."""


@dataclass(frozen=True)
class Question:
    task_id: int
    question: str
    answers: tuple[str, ...]
    split: str | None = None
    gold: str | None = None


@dataclass(frozen=True)
class QuestionSet:
    path: Path
    questions: tuple[Question, ...]

    def __len__(self) -> int:
        return len(self.questions)

    def get(self, task_id: int) -> Question:
        if not 0 <= task_id < len(self.questions):
            raise CorpusError(
                f"SearchQA task {task_id} is not in {self.path} "
                f"({len(self.questions)} questions: task ids 0-{len(self.questions) - 1})"
            )
        return self.questions[task_id]

    def splits(self) -> dict[str, tuple[int, ...]]:
        named: dict[str, list[int]] = {}
        for q in self.questions:
            if q.split is not None:
                named.setdefault(q.split, []).append(q.task_id)
        return {name: tuple(ids) for name, ids in named.items()}


def _answers(record: Mapping[str, object], where: str) -> tuple[str, ...]:
    answers = record.get("answers")
    if (
        not isinstance(answers, list)
        or not answers
        or not all(isinstance(a, str) and a.strip() for a in answers)
    ):
        raise CorpusError(f"{where}: field 'answers' must be a non-empty list of strings")
    return tuple(answers)


def load_questions(path: Path) -> QuestionSet:
    questions = []
    for number, record in read_jsonl(path, "question"):
        where = f"{path}:{number}"
        split, gold = record.get("split"), record.get("gold")
        for name, value in (("split", split), ("gold", gold)):
            if value is not None and not isinstance(value, str):
                raise CorpusError(f"{where}: field {name!r} must be a string")
        questions.append(
            Question(
                len(questions),
                text_field(record, "question", where),
                _answers(record, where),
                split,  # type: ignore[arg-type]
                gold,  # type: ignore[arg-type]
            )
        )
    if not questions:
        raise CorpusError(f"question file {path} has no questions")
    return QuestionSet(path, tuple(questions))


_sets: dict[tuple[str, int, int], QuestionSet] = {}
_sets_lock = threading.Lock()


def question_set(path: Path) -> QuestionSet:
    """The questions at `path`, read once per process (again when the file changes). Every
    set read here is known to the oracle (`known_sets`)."""
    resolved = path.expanduser().resolve()
    if not resolved.is_file():
        raise CorpusError(f"question file {resolved} does not exist")
    stat = resolved.stat()
    key = (str(resolved), stat.st_size, stat.st_mtime_ns)
    with _sets_lock:
        if key not in _sets:
            _sets[key] = load_questions(resolved)
        return _sets[key]


def known_sets() -> list[QuestionSet]:
    with _sets_lock:
        return list(_sets.values())


def configured_corpus(given: str | os.PathLike[str] | None = None) -> Path:
    """The corpus to use: the one given, else `$AGENTTRAIN_SEARCHQA_CORPUS`, else the bundle."""
    return Path(given or os.environ.get(CORPUS_ENV) or BUNDLED_CORPUS)


def configured_questions(given: str | os.PathLike[str] | None = None) -> Path:
    """The questions: the file given, else `$AGENTTRAIN_SEARCHQA_QUESTIONS`, else the bundle."""
    return Path(given or os.environ.get(QUESTIONS_ENV) or BUNDLED_QUESTIONS)
