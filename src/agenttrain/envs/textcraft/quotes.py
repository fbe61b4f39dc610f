"""Demonstrations whose thoughts quote the recipe they follow.

After SFT on oracle demonstrations, most failed depth-1 test episodes never craft anything
of the goal's recipe: the policy picks a distractor line or makes one up ("craft 4 coal
using 9 coal" for a coal block; docs/results.md). The oracle's thoughts never say which of
the listed commands they follow ("I need 9 coal for coal block; it is a basic item"), so the
policy has to find the goal's line silently. `with_quoted_recipes` puts the line in the
thought the first time a turn works toward an item, the goal's first:
`The recipe for coal block is "craft 1 coal block using 9 coal".` A later action can then
copy from its own thought. The actions and observations are unchanged.

With `ingredients=True` each quote is followed by which of the recipe's ingredients must be
crafted first ("All its ingredients are basic." otherwise). Quoting alone leaves "is there a
second recipe to quote?" implicit: GRPO then taught the policy to stop after one quote, right
at depth 1 (where a second one is made up) and wrong at depth 2 (where it is the
intermediate's). Naming the ingredients' kinds makes that decision an explicit statement.
"""

from __future__ import annotations

import re
from typing import Any

from agenttrain.envs.textcraft.oracle import (
    crafted_ingredients,
    goal_from_observation,
    recipes_used,
)
from agenttrain.envs.textcraft.recovery import untrained_start

SERVES = re.compile(
    r"I need \d+ .+? for (?P<purpose>.+?); it is a basic item"
    r"|I have the ingredients for (?P<made>.+?)(?: \(batch \d+ of \d+\))?, so I craft it"
)
"""The oracle's sentence in a thought, and the item its action works toward."""


def quote(item: str, command: str) -> str:
    """The sentence put before the oracle's own when `item`'s recipe is first used."""
    return f'The recipe for {item} is "{command}". '


def kinds(crafted: list[str]) -> str:
    """The sentence after a quote that says which ingredients must be crafted first."""
    if not crafted:
        return "All its ingredients are basic. "
    names = " and ".join(crafted)
    return f"Its ingredient{'s' if len(crafted) > 1 else ''} {names} must be crafted first. "


def with_quoted_recipes(record: dict[str, Any], ingredients: bool = False) -> dict[str, Any]:
    """`record` (a TextCraft demonstration: trajectory or chat record) as a chat record whose
    trained turns quote each recipe the first time they work toward its item; with
    `ingredients`, each quote says which of its ingredients are crafted."""
    messages = [dict(m) for m in as_chat(record)]
    first = next(m["content"] for m in messages if "Goal: craft" in m.get("content", ""))
    goal = goal_from_observation(first)
    recipes = recipes_used(goal)
    crafted = crafted_ingredients(goal) if ingredients else {}
    quoted: set[str] = set()
    for message in messages:
        if message["role"] != "assistant" or message.get("loss") is False:
            continue
        match = SERVES.search(message["content"])
        if match is None:
            continue
        chain = _chain(match["purpose"] or match["made"], recipes)
        text = "".join(
            quote(item, recipes[item][0]) + (kinds(crafted[item]) if ingredients else "")
            for item in chain
            if item not in quoted
        )
        quoted.update(chain)
        content = message["content"]
        message["content"] = content[: match.start()] + text + content[match.start() :]
    return {"env": "textcraft", "task_id": record["task_id"], "messages": messages}


def _chain(item: str, recipes: dict[str, tuple[str, str]]) -> list[str]:
    """`item` and what it is for, up to the goal, goal first (items crafted in the plan)."""
    chain = []
    while item in recipes and item not in chain:
        chain.append(item)
        item = recipes[item][1]
    return chain[::-1]


def as_chat(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The record's messages; a trajectory's acknowledgement of the instructions out of the
    loss, as its response mask leaves it."""
    if "turns" not in record:
        return record["messages"]
    start = untrained_start(record)
    return start + record["messages"][len(start) :]
