"""SQLGym in-process: AgentGym's text-to-SQL environment over SQLite.

Reference: agentgym.md section 1.6 and the `sqlgym==0.1.2` package AgentGym's server runs.
One turn: the observation is the schema text and the question; the action is one SQL
statement (read from the reply's last ```sql block, as AgentGym's client does); the
answer is the query's rows or its error, cut to 100 characters; reward 1 when the rows equal
the gold query's as sets (`execution`). Served by `agenttrain serve sqlgym`, it speaks
AgentGym's sqlgym dialect (`env_idx`, `item_id`, `[observation, null]` resets).

Tasks come from a BIRD folder (`AGENTTRAIN_BIRD_DIR` or `bird_dir=`: AgentGym's ids and
splits) or from the bundled databases (the default; `bundled`, `questions`).
"""

from __future__ import annotations

import sqlite3
from functools import cache

from agenttrain.envs.agentgym import SQLGYM, sql_block
from agenttrain.envs.base import (
    EnvironmentNotReset,
    EnvSpec,
    LocalEnvironment,
    Observation,
    StepResult,
)
from agenttrain.envs.prompts import agentgym_conversation_start, conversation_start
from agenttrain.envs.sqlgym.bird import PARTS
from agenttrain.envs.sqlgym.bundled import bundled_tasks
from agenttrain.envs.sqlgym.execution import STEP_LIMIT, execute, execution_match, gold_rows
from agenttrain.envs.sqlgym.oracle import DATABASE, oracle_for
from agenttrain.envs.sqlgym.sources import task_set
from agenttrain.envs.sqlgym.tasks import BIRD_DIR_VARIABLE, SqlTask, configured_bird_dir


def describe(observation: str) -> dict[str, object]:
    """The database a first observation asks about (evaluation breaks results down by it)."""
    found = DATABASE.search(observation)
    return {"db_id": found.group(1)} if found else {}


@cache
def spec_for(folder: str | None) -> EnvSpec:
    """The spec over BIRD folder `folder`, or over the bundled set (None). The folder is
    read when the splits are first asked for, so a wrong one fails then, naming it."""
    if folder:
        source = f"BIRD at {folder}"
        num_tasks = PARTS["dev"].stop
    else:
        source = f"the bundled databases (BIRD with {BIRD_DIR_VARIABLE})"
        num_tasks = len(bundled_tasks().tasks)
    return EnvSpec(
        name="sqlgym",
        display_name="SQLGym",
        description=f"Text-to-SQL in one SQLite statement, execution-match reward; {source}.",
        conversation_start=conversation_start("sqlgym"),
        agentgym_conversation_start=agentgym_conversation_start("sqlgym"),
        default_max_turns=1,
        action_format="react",
        protocol=SQLGYM.protocol,
        split_loader=lambda: task_set(folder).splits(),
        num_tasks=num_tasks,
        requirements=f"Python's sqlite3; {source}",
        breakdown_key="db_id",
        describe=describe,
        parse_action=sql_block,
        oracle=oracle_for(folder),
    )


SPEC = spec_for(configured_bird_dir())


class SqlGymEnv(LocalEnvironment):
    """One question at a time; each reset opens its database, `close` releases it."""

    spec = SPEC

    def __init__(self, bird_dir: str | None = None, sql_step_limit: int = STEP_LIMIT) -> None:
        super().__init__()
        folder = configured_bird_dir(bird_dir)
        self.tasks = task_set(folder)
        self.spec = spec_for(folder)
        self.blocking = self.tasks.blocking
        self.sql_step_limit = sql_step_limit
        self._task: SqlTask | None = None
        self._connection: sqlite3.Connection | None = None

    def reset_sync(self, task_id: int) -> Observation:
        task = self.tasks.task(task_id)
        self.close_sync()
        self._connection = self.tasks.connect(task)
        self._task = task
        return Observation(task.observation, {"task_id": task_id, "db_id": task.db_id})

    def step_sync(self, action: str) -> StepResult:
        if self._task is None or self._connection is None:
            raise EnvironmentNotReset("SQLGym: call reset(task_id) before step()")
        predicted = execute(self._connection, action, self.sql_step_limit)
        reward = 0.0
        if predicted.rows is not None:
            reward = execution_match(predicted, gold_rows(self._connection, self._task.gold_sql))
        return StepResult(predicted.text, reward, True, {"ground_truth": self._task.gold_sql})

    def close_sync(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
