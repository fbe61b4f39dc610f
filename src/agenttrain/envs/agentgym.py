"""Specs of the AgentGym environments that agenttrain drives through AgentGym's own servers.

The single source of each environment's AgentGym protocol, prompts, action rule and published
task ids: in-process ports (`envs/sqlgym`, `envs/alfworld`, `envs/searchqa`) start from these
specs, so `--server URL` against an unmodified AgentGym server and an in-process run read
replies and number tasks alike. Facts (routes, fields, task ranges, turn limits, server
defects) from reference/agentgym.md sections 0-3; the task id lists are AgentGym-RL's
(`agentgym_splits.json`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import cache
from importlib import resources

from agenttrain.envs.actions import (
    ActionParser,
    InvalidAction,
    after_last_action,
    whole_reply,
)
from agenttrain.envs.base import EnvSpec, WireProtocol
from agenttrain.envs.prompts import agentgym_conversation_start, conversation_start

SERVER_COMMANDS: Mapping[str, str] = {
    "textcraft": "cd AgentGym/agentenv-textcraft && textcraft --host 127.0.0.1 --port 36001",
    "babyai": "babyai --host 127.0.0.1 --port 36001",
    "sciworld": "sciworld --host 127.0.0.1 --port 36001",
    "alfworld": "alfworld --host 127.0.0.1 --port 36001",
    "webshop": "webshop --host 127.0.0.1 --port 36001",
    "sqlgym": "AGENTENV_SQLGYM_BIRD_PATH=./bird sqlgym --host 127.0.0.1 --port 36002",
    "searchqa": "searchqa --host 127.0.0.1 --port 36001",
}
"""How AgentGym's own server for each environment is started, once its package is installed
(AgentGym's `agentenv-<env>/setup.sh`). TextCraft reads its recipes relative to its package
folder; ALFWorld's server reads the games from ~/.cache/alfworld whatever $ALFWORLD_DATA says."""


def agentgym_server_command(env: str) -> str | None:
    """The command that starts AgentGym's server for `env`; None where AgentGym has none."""
    return SERVER_COMMANDS.get(env)


@cache
def published_ids(env: str) -> Mapping[str, tuple[int, ...]]:
    """AgentGym-RL's train/test task ids for `env` (the trailing number of `<task>_<n>`)."""
    data = resources.files("agenttrain.envs").joinpath("agentgym_splits.json").read_text()
    return {name: tuple(ids) for name, ids in json.loads(data).get(env, {}).items()}


def sql_block(reply: str) -> str:
    """The last ```sql block (SQLGym's server runs it as is). AgentGym's client would send a
    reply without one whole, as SQL; it is a format error here, with the rule as feedback."""
    if "```sql" not in reply:
        raise InvalidAction("Invalid format: put the SQL in a ```sql block.")
    return reply.split("```sql")[-1].split("```")[0].strip()


def webshop_action(reply: str) -> str:
    """After the last `Action:`, or a bare `search[...]`/`click[...]` reply as it stands."""
    if "Action:" not in reply and ("search[" in reply or "click[" in reply):
        return reply.strip()
    return after_last_action(reply)


def _remote(
    name: str,
    display_name: str,
    description: str,
    protocol: WireProtocol,
    max_turns: int,
    requirements: str,
    splits: Mapping[str, Sequence[int]] | None = None,
    num_tasks: int | None = None,
    parse_action: ActionParser = after_last_action,
) -> EnvSpec:
    published = dict(splits or {})
    return EnvSpec(
        name=name,
        display_name=display_name,
        description=description,
        conversation_start=conversation_start(name),
        agentgym_conversation_start=agentgym_conversation_start(name),
        default_max_turns=max_turns,
        action_format="react",
        protocol=protocol,
        split_loader=lambda: published,
        num_tasks=num_tasks,
        requirements=requirements,
        parse_action=parse_action,
    )


ALFWORLD = _remote(
    "alfworld",
    "ALFWorld",
    "Household tasks in TextWorld (pick, clean, heat, cool, examine, place).",
    WireProtocol(
        root_text="This is environment AlfWorld.",
        task_field="game",
        reset_extra={"world_type": "Text"},
        has_close=False,
        first_observation="with_actions",
        max_requests_in_flight=1,  # its handlers are `async def` doing blocking work
    ),
    max_turns=30,
    requirements="needs the ALFWorld game files (pip install alfworld; alfworld-download)",
    splits={"train": range(0, 2420), "test": range(2420, 2620)},
    num_tasks=2620,
)

WEBSHOP = _remote(
    "webshop",
    "WebShop",
    "Online shopping: search and click through a simulated store to buy the right product.",
    WireProtocol(
        root_text="ok",
        id_field="env_idx",
        task_field="session_id",
        reset_returns="pair",
        step_observation_field="state",
        has_close=False,
        max_sessions=8000,  # then /create hands out existing sessions round-robin
    ),
    max_turns=10,
    requirements="needs WebShop's product data, Lucene index (Java 11) and spaCy model",
    splits=published_ids("webshop"),
    parse_action=webshop_action,
)

SQLGYM = _remote(
    "sqlgym",
    "SQLGym",
    "Text-to-SQL on the BIRD benchmark, answered in one SQL statement.",
    # 8 slots, round-robin; the step answer's `info` holds the gold SQL
    replace(
        WEBSHOP.protocol,
        task_field="item_id",
        max_sessions=8,
        step_info=("ground_truth",),
        float_rewards=True,
    ),
    max_turns=1,
    requirements="needs the BIRD databases (AgentGym's setup.sh downloads them)",
    splits=published_ids("sqlgym"),
    num_tasks=10962,
    parse_action=sql_block,
)

SEARCHQA = _remote(
    "searchqa",
    "SearchQA",
    "Search-R1 style question answering with a Wikipedia retriever.",
    WireProtocol(
        root_text="ok",
        id_field="env_idx",
        task_field="id",
        task_required=True,
        create_task_field="id",
        reset_returns="text",
        float_rewards=True,
    ),
    max_turns=5,
    requirements="needs the wiki-18 E5 index and a CUDA GPU",
    splits={"train": range(51713, 221328), **published_ids("searchqa")},
    num_tasks=221328,
    parse_action=whole_reply,
)

REMOTE_SPECS = (ALFWORLD, WEBSHOP, SQLGYM, SEARCHQA)
