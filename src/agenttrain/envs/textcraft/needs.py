"""Demonstrations whose thoughts say what the item they work toward still needs.

After SFT, the commonest first failure on TextCraft's test goals is a craft before all its
ingredients are held ("Could not find enough items", 37% of failed episodes), and no SFT
model solves a depth-1 goal whose recipe lists two or three ingredients: it gets one, then
writes "I have the ingredients for beacon, so I craft it" (docs/results.md). The oracle's
thoughts never say what is still missing, so that decision is made silently.
`with_needs` ends each trained `get` or craft thought with the state of the item it works
toward: `Still needed for beacon: 5 glass, 3 obsidian.`, or `Nothing more is needed for
beacon.` before its craft. The next thought can then copy a shorter list. The counts come
from replaying the record's own actions, so a recovery demonstration's refused craft and
the ingredient fetched after it are counted where they happen. Actions and observations
are unchanged.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from agenttrain.envs.textcraft.game import CRAFT, GET
from agenttrain.envs.textcraft.oracle import goal_from_observation, recipes_used
from agenttrain.envs.textcraft.quotes import SERVES, as_chat
from agenttrain.envs.textcraft.recovery import ACTION, craft_inputs, crafted_item


def needs_sentence(item: str, missing: Counter[str]) -> str:
    """What a thought ends with: the ingredients `item` still lacks, or that it lacks none."""
    if not missing:
        return f" Nothing more is needed for {item}."
    listed = ", ".join(f"{count} {name}" for name, count in missing.items())
    return f" Still needed for {item}: {listed}."


def with_needs(record: dict[str, Any]) -> dict[str, Any]:
    """`record` (a TextCraft demonstration: trajectory or chat record) as a chat record whose
    trained `get` and craft thoughts end with what the item they work toward still needs."""
    messages = [dict(m) for m in as_chat(record)]
    first = next(m["content"] for m in messages if "Goal: craft" in m.get("content", ""))
    purposes = {
        item: purpose for item, (_, purpose) in recipes_used(goal_from_observation(first)).items()
    }
    actions = {i: _action(m["content"]) for i, m in enumerate(messages) if m["role"] == "assistant"}
    done = {i for i in actions if _succeeded(messages, i)}
    inventory: Counter[str] = Counter()
    for i, action in actions.items():
        if i not in done:
            continue
        _apply(action, inventory)
        message = messages[i]
        item = _works_toward(message["content"], purposes)
        if message.get("loss") is False or item is None:
            continue
        later = [actions[j] for j in done if j > i and crafted_item(actions[j]) == item]
        missing = _lacking(later, inventory)
        cut = ACTION.search(message["content"]).start()
        message["content"] = (
            message["content"][:cut] + needs_sentence(item, missing) + message["content"][cut:]
        )
    return {"env": "textcraft", "task_id": record["task_id"], "messages": messages}


def _lacking(crafts: list[str], inventory: Counter[str]) -> Counter[str]:
    """What `crafts` use beyond what `inventory` holds, in their recipe's order."""
    need = sum((craft_inputs(craft) for craft in crafts), Counter())
    return Counter({name: n - inventory[name] for name, n in need.items() if inventory[name] < n})


def _works_toward(thought: str, purposes: dict[str, str]) -> str | None:
    """The item a `get` is for, or that an intermediate just crafted is for; None for the
    goal's own craft and for thoughts the oracle did not write (a recovery's check)."""
    match = SERVES.search(thought)
    if match is None:
        return None
    item = match["purpose"] or purposes.get(match["made"], "the goal")
    return None if item == "the goal" else item


def _action(reply: str) -> str:
    match = ACTION.search(reply)
    return match.group(1).strip() if match else ""


def _succeeded(messages: list[dict[str, Any]], i: int) -> bool:
    """The game took the action (the goal's craft, which ends the episode, has no reply)."""
    if i + 1 == len(messages):
        return True
    return messages[i + 1]["content"].startswith(("Got ", "Crafted "))


def _apply(action: str, inventory: Counter[str]) -> None:
    if match := GET.match(action):
        inventory[match.group(2)] += int(match.group(1))
    elif match := CRAFT.match(action):
        count, item = match.group(1).split(" ", 1)
        inventory[item] += int(count)
        inventory.subtract(craft_inputs(action))
