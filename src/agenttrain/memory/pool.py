"""The experience pool: one SQLite file (in the run folder for training), searched by
embedding cosine or, without the embedder, by SQLite's FTS5 BM25.

Every write is one committed transaction under a lock, so concurrent summaries (HTTP
requests, the trainer) never lose inserts, and a crash loses at most the write in progress:
the file is the pool, and a resumed run opens it again.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from agenttrain.memory.embedding import MiniLMEmbedder
from agenttrain.memory.experience import Experience, require_train_split

SCHEMA = """
CREATE TABLE IF NOT EXISTS experiences (
    memory_id TEXT PRIMARY KEY,
    workspace_id TEXT NOT NULL,
    when_to_use TEXT NOT NULL,
    content TEXT NOT NULL,
    score REAL NOT NULL,
    task_id TEXT NOT NULL,
    split TEXT NOT NULL,
    run_step INTEGER NOT NULL,
    author TEXT NOT NULL,
    time_created TEXT NOT NULL,
    metadata TEXT NOT NULL,
    embedding BLOB,
    UNIQUE (workspace_id, when_to_use, content)
);
CREATE VIRTUAL TABLE IF NOT EXISTS experiences_fts USING fts5(when_to_use, memory_id UNINDEXED);
"""
COLUMNS = (
    "memory_id, workspace_id, when_to_use, content, score, task_id, split, run_step, "
    "author, time_created, metadata"
)


class ExperiencePool:
    def __init__(self, path: Path | str = ":memory:", embedder: MiniLMEmbedder | None = None):
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.embedder = embedder
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), check_same_thread=False)
        with self._lock, self._db:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.executescript(SCHEMA)

    @property
    def retrieval(self) -> str:
        return "embedding" if self.embedder is not None else "bm25"

    def add(self, experiences: Sequence[Experience]) -> int:
        """Insert experiences (train split only); an identical one already present is kept.
        Returns how many were inserted."""
        for item in experiences:
            require_train_split(item.task_id, item.split)
        vectors = self._embed([e.when_to_use for e in experiences]) if experiences else None
        inserted = 0
        with self._lock, self._db:
            for index, item in enumerate(experiences):
                blob = vectors[index].tobytes() if vectors is not None else None
                cursor = self._db.execute(
                    f"INSERT OR IGNORE INTO experiences ({COLUMNS}, embedding) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (*_row(item), blob),
                )
                if cursor.rowcount:
                    inserted += 1
                    self._db.execute(
                        "INSERT INTO experiences_fts (when_to_use, memory_id) VALUES (?, ?)",
                        (item.when_to_use, item.memory_id),
                    )
        return inserted

    def search(self, query: str, top_k: int, workspace_id: str = "default") -> list[Experience]:
        """The `top_k` experiences whose `when_to_use` best matches `query`."""
        if top_k < 1 or not query.strip():
            return []
        if self.embedder is None:
            return self._bm25(query, top_k, workspace_id)
        return self._nearest(query, top_k, workspace_id)

    def count(self, workspace_id: str | None = None) -> int:
        with self._lock:
            if workspace_id is None:
                return self._db.execute("SELECT COUNT(*) FROM experiences").fetchone()[0]
            return self._db.execute(
                "SELECT COUNT(*) FROM experiences WHERE workspace_id = ?", (workspace_id,)
            ).fetchone()[0]

    def drop_after(self, step: int) -> int:
        """Forget experiences written after training step `step` (a run resumed from that
        checkpoint replays those steps, which write them again)."""
        with self._lock, self._db:
            ids = [
                row[0]
                for row in self._db.execute(
                    "SELECT memory_id FROM experiences WHERE run_step > ?", (step,)
                )
            ]
            self._db.executemany("DELETE FROM experiences WHERE memory_id = ?", [(i,) for i in ids])
            self._db.executemany(
                "DELETE FROM experiences_fts WHERE memory_id = ?", [(i,) for i in ids]
            )
        return len(ids)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _embed(self, texts: Sequence[str]) -> np.ndarray | None:
        return self.embedder.embed(texts) if self.embedder is not None else None

    def _nearest(self, query: str, top_k: int, workspace_id: str) -> list[Experience]:
        assert self.embedder is not None
        self._embed_missing()
        with self._lock:
            rows = self._db.execute(
                f"SELECT {COLUMNS}, embedding FROM experiences WHERE workspace_id = ?",
                (workspace_id,),
            ).fetchall()
        if not rows:
            return []
        matrix = np.stack([np.frombuffer(row[-1], dtype=np.float32) for row in rows])
        similarity = matrix @ self.embedder.embed([query])[0]
        order = np.argsort(-similarity, kind="stable")
        return _distinct([_experience(rows[i][:-1]) for i in order], top_k)

    def _embed_missing(self) -> None:
        """Rows written while BM25 was in use get their vectors on first embedding search."""
        with self._lock:
            missing = self._db.execute(
                "SELECT memory_id, when_to_use FROM experiences WHERE embedding IS NULL"
            ).fetchall()
        if not missing:
            return
        vectors = self._embed([text for _, text in missing])
        assert vectors is not None
        updates = [(v.tobytes(), row[0]) for row, v in zip(missing, vectors, strict=True)]
        with self._lock, self._db:
            self._db.executemany(
                "UPDATE experiences SET embedding = ? WHERE memory_id = ?", updates
            )

    def _bm25(self, query: str, top_k: int, workspace_id: str) -> list[Experience]:
        words = re.findall(r"\w+", query.lower())
        if not words:
            return []
        match = " OR ".join(f'"{word}"' for word in dict.fromkeys(words))
        columns = ", ".join(f"e.{name.strip()}" for name in COLUMNS.split(","))
        with self._lock:
            rows = self._db.execute(
                f"SELECT {columns} FROM experiences_fts f JOIN experiences e "
                "ON e.memory_id = f.memory_id WHERE experiences_fts MATCH ? "
                "AND e.workspace_id = ? ORDER BY bm25(experiences_fts), e.rowid LIMIT ?",
                (match, workspace_id, top_k * 4),
            ).fetchall()
        return _distinct([_experience(row) for row in rows], top_k)


def _row(item: Experience) -> tuple:
    return (
        item.memory_id,
        item.workspace_id,
        item.when_to_use,
        item.content,
        item.score,
        item.task_id,
        item.split,
        item.run_step,
        item.author,
        item.time_created,
        json.dumps(item.metadata),
    )


def _experience(row: Sequence) -> Experience:
    (memory_id, workspace, when, content, score, task, split, step, author, created, meta) = row
    return Experience(
        when_to_use=when,
        content=content,
        score=score,
        task_id=task,
        split=split,
        run_step=step,
        workspace_id=workspace,
        author=author,
        metadata=json.loads(meta),
        memory_id=memory_id,
        time_created=created,
    )


def _distinct(ranked: Sequence[Experience], top_k: int) -> list[Experience]:
    """The first `top_k` with distinct content (ReMe drops duplicate content too)."""
    seen: set[str] = set()
    kept: list[Experience] = []
    for item in ranked:
        if item.content not in seen:
            seen.add(item.content)
            kept.append(item)
        if len(kept) == top_k:
            break
    return kept
