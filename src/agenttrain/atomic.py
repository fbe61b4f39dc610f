"""Folders that appear whole or not at all (checkpoints, converted models)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_folder(final: Path) -> Iterator[Path]:
    """Yield a staging folder beside `final`; on success it replaces `final` in one rename,
    on failure it is removed. A reader never sees a half-written `final`."""
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        yield staging
        if final.exists():
            shutil.rmtree(final)
        staging.rename(final)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
