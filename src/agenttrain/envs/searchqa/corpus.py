"""The passages SearchQA searches, and BM25 retrieval over them with SQLite FTS5.

A corpus is a JSONL file, one passage a line: `{"id": str, "title": str, "text": str}`.
FTS5 ships inside Python's own `sqlite3`, so retrieval needs no new dependency; its `bm25()`
is Okapi BM25 (k1 = 1.2, b = 0.75) summed over the title and text columns. Words are
lower-cased, accents folded and Porter-stemmed ("founded" finds "founder"). One index per
corpus file and process, built in memory on first use and shared by every environment.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

WORD = re.compile(r"\w+")


class CorpusError(ValueError):
    """A corpus or question file that cannot be used; the message names the file and line."""


@dataclass(frozen=True)
class Passage:
    id: str
    title: str
    text: str


def read_jsonl(path: Path, what: str) -> Iterator[tuple[int, dict[str, object]]]:
    """(line number, object) for each non-blank line; a line that is not a JSON object is a
    `CorpusError` naming the file and line."""
    if not path.is_file():
        raise CorpusError(f"{what} file {path} does not exist")
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as bad:
                raise CorpusError(f"{path}:{number}: not valid JSON ({bad.msg})") from None
            if not isinstance(record, dict):
                raise CorpusError(f"{path}:{number}: expected a JSON object, got {line[:80]!r}")
            yield number, record


def text_field(record: dict[str, object], name: str, where: str) -> str:
    value = record.get(name)
    if not isinstance(value, str):
        found = "missing" if value is None else f"a {type(value).__name__}"
        raise CorpusError(f"{where}: field {name!r} must be a string ({found})")
    return value


def load_passages(path: Path) -> list[Passage]:
    """Every passage of a corpus file, checked: string id, title and text; ids unique."""
    passages: list[Passage] = []
    seen: dict[str, int] = {}
    for number, record in read_jsonl(path, "corpus"):
        where = f"{path}:{number}"
        passage = Passage(*(text_field(record, name, where) for name in ("id", "title", "text")))
        if passage.id in seen:
            first = seen[passage.id]
            raise CorpusError(f"{where}: passage id {passage.id!r} already on line {first}")
        seen[passage.id] = number
        passages.append(passage)
    if not passages:
        raise CorpusError(f"corpus file {path} has no passages")
    return passages


class Bm25Index:
    """BM25 search over a list of passages (an in-memory FTS5 table)."""

    def __init__(self, passages: list[Passage]) -> None:
        self.passages = passages
        self.by_id = {p.id: p for p in passages}
        self._lock = threading.Lock()
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._db.execute(
            "CREATE VIRTUAL TABLE docs USING fts5(title, text, "
            "tokenize='porter unicode61 remove_diacritics 2')"
        )
        self._db.executemany(
            "INSERT INTO docs(rowid, title, text) VALUES (?, ?, ?)",
            ((row, p.title, p.text) for row, p in enumerate(passages)),
        )
        self._db.commit()

    def search(self, query: str, k: int) -> list[Passage]:
        """The `k` best passages for `query`, best first; none when it has no words.

        The query's words are OR-ed as quoted terms, so punctuation or FTS5 operators in a
        model's query are plain text, never syntax."""
        words = dict.fromkeys(w.lower() for w in WORD.findall(query))
        if not words or k <= 0:
            return []
        match = " OR ".join(f'"{w}"' for w in words)
        with self._lock:
            rows = self._db.execute(
                "SELECT rowid FROM docs WHERE docs MATCH ? ORDER BY bm25(docs) LIMIT ?",
                (match, k),
            ).fetchall()
        return [self.passages[row] for (row,) in rows]


_indexes: dict[tuple[str, int, int], Bm25Index] = {}
_indexes_lock = threading.Lock()


def index_for(path: Path) -> Bm25Index:
    """The process's index of the corpus at `path` (built again when the file changes)."""
    resolved = path.expanduser().resolve()
    if not resolved.is_file():
        raise CorpusError(f"corpus file {resolved} does not exist")
    stat = resolved.stat()
    key = (str(resolved), stat.st_size, stat.st_mtime_ns)
    with _indexes_lock:
        if key not in _indexes:
            _indexes[key] = Bm25Index(load_passages(resolved))
        return _indexes[key]
