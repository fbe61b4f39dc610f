"""Specs of the AgentGym environments that agenttrain drives through AgentGym's own servers.

They do not run in-process here (their data are not installable from PyPI, or they are not
ported yet), but the client speaks their wire dialect exactly, so a rollout or evaluation
can use an unmodified AgentGym server: `--server http://host:port`. Facts (routes, fields,
task ranges, turn limits) from reference/agentgym.md sections 0-3. Each spec carries the
rule by which AgentGym's client for that environment reads an action from a ReAct reply.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from agenttrain.envs.actions import (
    ActionParser,
    InvalidAction,
    after_last_action,
    whole_reply,
)
from agenttrain.envs.base import EnvSpec, WireProtocol
from agenttrain.envs.prompts import agentgym_conversation_start, conversation_start


def _ranges(**splits: range) -> Mapping[str, Sequence[int]]:
    return dict(splits)


def sql_block(reply: str) -> str:
    """The last ```sql block (SQLGym's server runs it as is)."""
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
    ),
    max_turns=30,
    requirements="needs the ALFWorld game files (alfworld-download); run AgentGym's server",
    splits=_ranges(train=range(0, 2420), test=range(2420, 2620)),
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
    ),
    max_turns=10,
    requirements="needs WebShop's product data, Lucene index and spaCy model; run its server",
    parse_action=webshop_action,
)

SQLGYM = _remote(
    "sqlgym",
    "SQLGym",
    "Text-to-SQL on the BIRD benchmark, answered in one SQL statement.",
    replace(WEBSHOP.protocol, task_field="item_id"),  # same dialect as WebShop
    max_turns=1,
    requirements="needs the BIRD databases (downloaded by AgentGym's setup.sh); run its server",
    splits=_ranges(train=range(0, 9428), test=range(9428, 10962)),
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
        create_task_field="id",
        reset_returns="text",
    ),
    max_turns=5,
    requirements="needs the wiki-18 E5 index and a CUDA GPU; run AgentGym's `searchqa` server",
    splits=_ranges(train=range(51713, 221328), test=range(0, 51713)),
    num_tasks=221328,
    parse_action=whole_reply,
)

REMOTE_SPECS = (ALFWORLD, WEBSHOP, SQLGYM, SEARCHQA)
