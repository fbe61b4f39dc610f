"""Demonstrations that recover from a refused craft.

Oracle demonstrations never show the environment refusing an action, so a policy trained on
them has never seen what comes after a refusal. After SFT most of TextCraft's failed depth-2
episodes are one refused craft repeated until the turn limit (docs/results.md). `with_recovery`
rewrites an oracle episode so that one craft comes before the `get` of an ingredient it
needs: the environment refuses it, then the demonstration gets the ingredient and crafts
again. The refused turn carries no loss (the policy should not learn to make it); the
recovery does. Every observation comes from replaying the actions in the real game.

Style `inventory` puts an `inventory` check between the refusal and the `get`, and the `get`'s
thought names the ingredient the inventory lacks: after plain recoveries, 43% of a policy's
`get`s after a refusal fetched an ingredient it already had (docs/results.md), so the
demonstration shows where to read what is missing.
"""

from __future__ import annotations

import random
import re
from typing import Any, Literal

from agenttrain.envs.base import StepResult
from agenttrain.envs.textcraft.env import TextCraftEnv
from agenttrain.envs.textcraft.game import NOT_ENOUGH

REFUSAL = NOT_ENOUGH
"""How the game refuses a craft whose ingredients are not in the inventory."""

RECOVERY_THOUGHT = "The craft was refused: an ingredient is missing. "
"""Put before the oracle's thought on the turn after the refusal (react format)."""

GET = re.compile(r"get (?:[0-9]+ )?(.*)")
"""A `get` action and the item it names."""

RecoveryStyle = Literal["plain", "inventory"]
RECOVERY_STYLES: tuple[RecoveryStyle, ...] = ("plain", "inventory")

CHECK_REPLY = (
    "Thought:\nThe craft was refused: an ingredient is missing, so I check my inventory."
    "\n\nAction:\ninventory"
)
"""Style `inventory`: the turn after the refusal."""


def lacking_thought(item: str, held: int) -> str:
    """Style `inventory`: what the inventory shows, put before the oracle's `get` thought."""
    if held:
        return f"The inventory has only {held} {item}, not enough. "
    return f"The inventory has no {item}. "


def _replay(task_id: int, actions: list[str]) -> tuple[list[StepResult], bool]:
    """The game's answers to `actions` in a fresh game of `task_id`, and whether the goal was
    made."""
    env = TextCraftEnv()
    env.reset_sync(task_id)
    results = [env.step_sync(action) for action in actions]
    return results, any(result.reward > 0 for result in results)


def _slip_points(actions: list[str]) -> list[int]:
    """Turns `i` where a `get` is followed by a craft: moving the craft before the get is the
    slip (the craft lacks what the get brings)."""
    return [
        i
        for i in range(len(actions) - 1)
        if actions[i].startswith("get ") and actions[i + 1].startswith("craft ")
    ]


def _conversation_start(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The messages before the first turn's reply (instructions, acknowledgement, task)."""
    messages, turns = record["messages"], record["turns"]
    start = len(messages) - (2 * len(turns) - 1)  # the last observation is not a message
    if start < 1 or messages[start]["content"] != turns[0]["reply"]:
        raise ValueError(f"task {record['task_id']}: messages and turns do not line up")
    return messages[:start]


def with_recovery(
    record: dict[str, Any], rng: random.Random, style: RecoveryStyle = "plain"
) -> dict[str, Any] | None:
    """`record` (a successful TextCraft trajectory) as a chat record with one refused craft and
    its recovery; None when no slip point gives a refusal and still a success."""
    actions = [turn["action"] for turn in record["turns"]]
    points = _slip_points(actions)
    rng.shuffle(points)
    for i in points:
        order: list[int | None] = [*range(i), i + 1, *range(i, len(actions))]
        if style == "inventory":
            order.insert(i + 1, None)  # None: the inventory check
        steps = [actions[k] if k is not None else "inventory" for k in order]
        results, won = _replay(record["task_id"], steps)
        if won and results[i].observation.startswith(REFUSAL):
            return _rewritten(record, order, results, i)
    return None


def _rewritten(
    record: dict[str, Any], order: list[int | None], results: list[StepResult], slip: int
) -> dict[str, Any]:
    """The chat record of the replayed `order` (indices into the record's turns, None for an
    inventory check) whose turn `slip` was refused."""
    replies = [turn["reply"] for turn in record["turns"]]
    head = _conversation_start(record)
    messages = [{**m, "loss": False} if m["role"] == "assistant" else m for m in head]
    checked = order[slip + 1] is None
    for position, (k, result) in enumerate(zip(order, results, strict=True)):
        reply = CHECK_REPLY if k is None else replies[k]
        if position == slip + 1 + checked and reply.startswith("Thought:\n"):
            if checked:
                item = GET.match(record["turns"][k]["action"])[1]
                prefix = lacking_thought(item, results[slip + 1].info["inventory"].get(item, 0))
            else:
                prefix = RECOVERY_THOUGHT
            reply = "Thought:\n" + prefix + reply.removeprefix("Thought:\n")
        assistant = {"role": "assistant", "content": reply}
        if position == slip:
            assistant["loss"] = False
        messages += [assistant, {"role": "user", "content": result.observation}]
    return {"env": "textcraft", "task_id": record["task_id"], "messages": messages[:-1]}
