"""What ALFWorld needs to run here, and the message that names what is missing."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

DATA_ENV = "ALFWORLD_DATA"
SERVER = "AgentGym's ALFWorld server (agentenv-alfworld: `alfworld --host 0.0.0.0 --port 36001`)"


class ALFWorldUnavailable(RuntimeError):
    """ALFWorld cannot run in this process; the message says what is missing and how to get it."""


def data_dir(given: str | os.PathLike[str] | None = None) -> Path | None:
    value = given or os.environ.get(DATA_ENV)
    return Path(value).expanduser() if value else None


def package_installed() -> bool:
    """Whether `alfworld` is importable as a real package (a folder that merely bears its
    name, such as a namespace package, does not count)."""
    spec = importlib.util.find_spec("alfworld")
    return spec is not None and spec.origin is not None


def missing(given: str | os.PathLike[str] | None = None) -> list[str]:
    """Each missing piece with how to get it; empty when ALFWorld can run here."""
    gaps = []
    if not package_installed():
        gaps.append("the `alfworld` package (pip install alfworld; AgentGym pins 0.3.3)")
    folder = data_dir(given)
    if folder is None:
        gaps.append(
            f"${DATA_ENV} is not set (export {DATA_ENV}=~/.cache/alfworld, then run "
            "alfworld-download)"
        )
    elif not (folder / "json_2.1.1").is_dir():
        gaps.append(f"the game files: {folder}/json_2.1.1 does not exist (run alfworld-download)")
    return gaps


def describe_missing(gaps: list[str]) -> str:
    """For `agenttrain envs` and refusals that add how to point at a server themselves."""
    return f"missing {'; '.join(gaps)}; or run {SERVER}"


def require(given: str | os.PathLike[str] | None = None) -> Path:
    """The data folder, or `ALFWorldUnavailable` naming everything that is missing."""
    gaps = missing(given)
    if gaps:
        raise ALFWorldUnavailable(
            f"ALFWorld cannot run in-process here: missing {'; '.join(gaps)}. Install what is "
            f"missing, or run {SERVER} and pass --server http://HOST:36001"
        )
    folder = data_dir(given)
    assert folder is not None
    return folder
