"""Which task an id names, per numbering: ours, a server's, or a published table's.

Task ids are portable only when every server numbers tasks the same way. AgentGym's
TextCraft server does not: it reads recipe files in `os.listdir` order, which sets both its
goal order and (through a cycle guard) its goal set, so its id 12 is another goal than ours
and each install (machine, copy of the files) numbers differently. Such environments
declare `EnvSpec.task_key`, the entry of `describe()` that identifies a task (TextCraft: the
goal). A `TaskTable` maps the ids of one numbering to those identities, so an id can be
carried from one numbering to another by what it means instead of by its number.

Table file format (JSON; written by the client's cache, readable as a published table):

    {"env": "textcraft", "tasks": {"0": "acacia planks", "1": "birch planks", ...}}

`tasks` maps ids (decimal strings) to identities; it may be partial (e.g. only a published
test split). Other top-level fields (`server`, `root_text`, `probed_at`) are ignored on read.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import cached_property
from hashlib import sha256
from pathlib import Path
from typing import Any

from agenttrain.envs.base import EnvError, EnvSpec
from agenttrain.envs.make import make_env

OURS = "agenttrain's numbering"
"""How error messages name the numbering of the in-process environments."""


class TaskMapError(EnvError):
    """Task ids cannot be carried between numberings as asked."""


class TaskNotFound(TaskMapError):
    """An id or identity is absent from a table (a goal the server does not have)."""


class TaskOverlap(TaskMapError):
    """Train and test ids name some of the same tasks."""


class TaskTableFileError(TaskMapError):
    """A table file is not in the documented format."""


@dataclass(frozen=True)
class TaskTable:
    """The identity of each task id of one numbering, for one environment."""

    env: str
    keys: Mapping[int, str]
    origin: str = field(default="", compare=False)
    """Where the numbering comes from, for error messages (a server URL, a file)."""

    def key_of(self, task_id: int) -> str:
        if task_id not in self.keys:
            raise TaskNotFound(
                f"{self.env} task id {task_id} is not among the {len(self.keys)} ids of "
                f"{self.origin or 'the table'}"
            )
        return self.keys[task_id]

    def id_of(self, key: str) -> int:
        """The lowest id naming `key` (a server that wraps ids around names it again later)."""
        if key not in self._first_ids:
            raise TaskNotFound(
                f"{self.env} task {key!r} is not among the {len(self._first_ids)} tasks of "
                f"{self.origin or 'the table'}"
            )
        return self._first_ids[key]

    @cached_property
    def _first_ids(self) -> dict[str, int]:
        first: dict[str, int] = {}
        for task_id in sorted(self.keys, reverse=True):
            first[self.keys[task_id]] = task_id
        return first

    def to_json(self, **about: Any) -> dict[str, Any]:
        tasks = {str(task_id): self.keys[task_id] for task_id in sorted(self.keys)}
        return {"env": self.env, **about, "tasks": tasks}

    @classmethod
    def from_json(cls, data: Any, origin: str) -> TaskTable:
        """A table from the file format; a clear error naming `origin` otherwise."""
        if not isinstance(data, Mapping):
            raise TaskTableFileError(f"{origin}: expected a JSON object with 'env' and 'tasks'")
        env, tasks = data.get("env"), data.get("tasks")
        if not isinstance(env, str) or not isinstance(tasks, Mapping):
            raise TaskTableFileError(
                f"{origin}: 'env' must be a string and 'tasks' an object of id -> task"
            )
        keys: dict[int, str] = {}
        for task_id, key in tasks.items():
            if not str(task_id).isdigit() or not isinstance(key, str):
                raise TaskTableFileError(
                    f"{origin}: task entry {task_id!r}: {key!r} is not a decimal id -> text"
                )
            keys[int(task_id)] = key
        return cls(env, keys, origin)


def read_task_table(path: str | Path) -> TaskTable:
    """A published id -> task table (the module docstring gives the format)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as failure:
        raise TaskTableFileError(f"{path}: cannot read a task table: {failure}") from None
    return TaskTable.from_json(data, f"the table {path}")


def write_task_table(path: str | Path, table: TaskTable, **about: Any) -> None:
    """Write `table` atomically (concurrent runs may share the cache folder)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        "w", dir=path.parent, prefix=path.name, suffix=".tmp", delete=False
    ) as handle:
        json.dump(table.to_json(**about), handle, indent=1)
    os.replace(handle.name, path)


_local_tables: dict[str, TaskTable] = {}


async def local_task_table(spec: EnvSpec) -> TaskTable:
    """Our numbering: the identity of ids 0..num_tasks-1 of the in-process environment."""
    if spec.name in _local_tables:
        return _local_tables[spec.name]
    if spec.task_key is None or spec.describe is None or spec.num_tasks is None:
        raise TaskMapError(
            f"{spec.name} declares no task_key, describe and num_tasks to identify tasks by"
        )
    env = make_env(spec.name)
    keys: dict[int, str] = {}
    try:
        for task_id in range(spec.num_tasks):
            first = await env.reset(task_id)
            keys[task_id] = str(spec.describe(first.text)[spec.task_key])
    finally:
        await env.close()
    _local_tables[spec.name] = TaskTable(spec.name, keys, OURS)
    return _local_tables[spec.name]


def translate_ids(ids: Iterable[int], source: TaskTable, target: TaskTable) -> list[int]:
    """The ids in `target`'s numbering of the tasks `ids` name in `source`'s.

    E.g. AgentGym's published test ids (their server's numbering, `source` read with
    `read_task_table`) to ours (`target` = `local_task_table(spec)`).
    """
    if source.env != target.env:
        raise TaskMapError(f"cannot translate {source.env} task ids with a {target.env} table")
    return [target.id_of(source.key_of(task_id)) for task_id in ids]


def check_split_disjoint(
    train_ids: Iterable[int], test_ids: Iterable[int], table: TaskTable
) -> None:
    """Refuse train and test ids (both in `table`'s numbering) that name a common task."""
    train = {table.key_of(task_id) for task_id in train_ids}
    shared = sorted(
        {(key, task_id) for task_id in test_ids if (key := table.key_of(task_id)) in train}
    )
    if shared:
        shown = ", ".join(f"{key!r} (test id {task_id})" for key, task_id in shared[:5])
        more = f" and {len(shared) - 5} more" if len(shared) > 5 else ""
        raise TaskOverlap(
            f"{len(shared)} test {table.env} tasks are also trained on: {shown}{more}"
        )


def default_cache_dir() -> Path:
    """$AGENTTRAIN_CACHE/task-tables, else the user cache dir's agenttrain/task-tables."""
    configured = os.environ.get("AGENTTRAIN_CACHE")
    if configured:
        return Path(configured) / "task-tables"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "agenttrain" / "task-tables"


@dataclass(frozen=True)
class TaskTableCache:
    """Servers' probed tables, one file per server (keyed by URL and root text)."""

    folder: Path

    def path(self, url: str, root_text: str) -> Path:
        digest = sha256(f"{url}\n{root_text}".encode()).hexdigest()[:16]
        return self.folder / f"{digest}.json"

    def load(self, url: str, root_text: str, env: str) -> TaskTable | None:
        """The cached table of the server, or None (absent, unreadable, other environment)."""
        try:
            table = read_task_table(self.path(url, root_text))
        except TaskTableFileError:
            return None
        return TaskTable(env, table.keys, f"the server at {url}") if table.env == env else None

    def save(self, url: str, root_text: str, table: TaskTable) -> None:
        probed_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        write_task_table(
            self.path(url, root_text), table, server=url, root_text=root_text, probed_at=probed_at
        )
