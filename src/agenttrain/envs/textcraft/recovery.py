"""Demonstrations that recover from a refused craft.

Oracle demonstrations never show the environment refusing an action, so a policy trained on
them has never seen what comes after a refusal. After SFT most of TextCraft's failed depth-2
episodes are one refused craft repeated until the turn limit (docs/results.md). `with_recovery`
rewrites an oracle episode so that one craft comes before the `get` of an ingredient it
needs: the environment refuses it, then the demonstration gets the ingredient and crafts
again. The refused turn carries no loss (the policy should not learn to make it); the
recovery does. Every observation comes from replaying the actions in the real game.
"""

from __future__ import annotations

import random
from typing import Any

from agenttrain.envs.textcraft.env import TextCraftEnv

REFUSAL = "Could not find enough items"
"""How the game refuses a craft whose ingredients are not in the inventory."""

RECOVERY_THOUGHT = "The craft was refused: an ingredient is missing. "
"""Put before the oracle's thought on the turn after the refusal (react format)."""


def _replay(task_id: int, actions: list[str]) -> tuple[list[str], bool]:
    """Observations of `actions` in a fresh game of `task_id`, and whether the goal was made."""
    env = TextCraftEnv()
    env.reset_sync(task_id)
    observations, won = [], False
    for action in actions:
        result = env.step_sync(action)
        observations.append(result.observation)
        won = won or result.reward > 0
    return observations, won


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


def with_recovery(record: dict[str, Any], rng: random.Random) -> dict[str, Any] | None:
    """`record` (a successful TextCraft trajectory) as a chat record with one refused craft and
    its recovery; None when no slip point gives a refusal and still a success."""
    turns = record["turns"]
    actions = [turn["action"] for turn in turns]
    replies = [turn["reply"] for turn in turns]
    points = _slip_points(actions)
    rng.shuffle(points)
    for i in points:
        order = [*range(i), i + 1, *range(i, len(actions))]
        observations, won = _replay(record["task_id"], [actions[k] for k in order])
        if not won or not observations[i].startswith(REFUSAL):
            continue
        head = _conversation_start(record)
        messages = [{**m, "loss": False} if m["role"] == "assistant" else m for m in head]
        for position, (k, observation) in enumerate(zip(order, observations, strict=True)):
            reply = replies[k]
            if position == i + 1 and reply.startswith("Thought:\n"):
                reply = "Thought:\n" + RECOVERY_THOUGHT + reply.removeprefix("Thought:\n")
            assistant = {"role": "assistant", "content": reply}
            if position == i:
                assistant["loss"] = False
            messages += [assistant, {"role": "user", "content": observation}]
        return {"env": "textcraft", "task_id": record["task_id"], "messages": messages[:-1]}
    return None
