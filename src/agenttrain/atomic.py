"""Files and folders that appear whole or not at all (checkpoints, converted models, run
records)."""

from __future__ import annotations

import fcntl
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def write_text_atomically(path: Path, text: str) -> None:
    """Write `text` to a staging file beside `path` and rename it over `path`: a run stopped
    mid-write leaves the old file, never half of the new one."""
    staging = path.with_suffix(".partial")
    staging.write_text(text)
    staging.replace(path)


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


@contextmanager
def one_at_a_time(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `lock_path` (created if missing), waiting for any other
    process that holds it. Two first runs on a fresh machine (or two test workers) would
    otherwise both build the same folder, and the second rename would delete the folder
    the first is already reading."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
