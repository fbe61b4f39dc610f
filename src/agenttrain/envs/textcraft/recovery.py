"""Demonstrations that recover from a refused action.

Oracle demonstrations never show the environment refusing an action, so a policy trained on
them has never seen what comes after a refusal. After SFT most of TextCraft's failed depth-2
episodes are one refused action repeated until the turn limit (docs/results.md).
`with_recovery` rewrites an oracle episode with one slip that the game refuses, followed by
the oracle's own continuation, which recovers. The refused turn carries no loss (the policy
should not learn to make it); the recovery does. Every observation comes from replaying the
actions in the real game.

Two slips (`slips`):
- `craft`: a craft moved before the `get` of an ingredient it needs ("Could not find enough
  items"); the demonstration then gets the ingredient and crafts again.
- `get`: a `get` of an intermediate item that must be crafted ("Could not find blaze
  powder"), put where the oracle starts on that item's ingredients; the demonstration then
  fetches them and crafts it. After GRPO with the recovery penalty, such `get`s sent again
  were what most failed test episodes did, and the policy almost never went after the item's
  tree instead (docs/results.md, 2026-11-27).

Style `inventory` (craft slips only) puts an `inventory` check between the refusal and the
`get`, and the `get`'s thought names the ingredient the inventory lacks: after plain
recoveries, 43% of a policy's `get`s after a refusal fetched an ingredient it already had
(docs/results.md), so the demonstration shows where to read what is missing. A refused `get`
names what is missing itself, so its recovery has no check.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from typing import Any, Literal

from agenttrain.envs.base import StepResult
from agenttrain.envs.textcraft.env import TextCraftEnv
from agenttrain.envs.textcraft.game import CRAFT, NOT_ENOUGH, refused

REFUSAL = NOT_ENOUGH
"""How the game refuses a craft whose ingredients are not in the inventory."""

RECOVERY_THOUGHT = "The craft was refused: an ingredient is missing. "
"""Put before the oracle's thought on the turn after a refused craft (react format)."""

GET = re.compile(r"get (?:[0-9]+ )?(.*)")
"""A `get` action and the item it names."""

ACTION = re.compile(r"\n\nAction:\n(.*)$", re.S)
"""The action of a react reply."""

RecoveryStyle = Literal["plain", "inventory"]
RECOVERY_STYLES: tuple[RecoveryStyle, ...] = ("plain", "inventory")

Slip = Literal["craft", "get"]
RecoveryFrom = Literal["craft", "get", "both"]
RECOVERY_FROM: tuple[RecoveryFrom, ...] = ("craft", "get", "both")
SLIPS: dict[RecoveryFrom, tuple[Slip, ...]] = {
    "craft": ("craft",),
    "get": ("get",),
    "both": ("craft", "get"),
}
"""The slips each `--recovery-from` choice writes."""
REFUSED: dict[RecoveryFrom, str] = {
    "craft": "a refused craft",
    "get": "a refused get",
    "both": "a refused craft or get",
}
"""What the demonstrations of each `--recovery-from` choice recover from, for messages."""

CHECK_REPLY = (
    "Thought:\nThe craft was refused: an ingredient is missing, so I check my inventory."
    "\n\nAction:\ninventory"
)
"""Style `inventory`: the turn after a refused craft."""


def lacking_thought(item: str, held: int) -> str:
    """Style `inventory`: what the inventory shows, put before the oracle's `get` thought."""
    if held:
        return f"The inventory has only {held} {item}, not enough. "
    return f"The inventory has no {item}. "


def uncraftable_get_reply(count: str, item: str) -> str:
    """The refused turn of a `get` slip: the policy takes an intermediate for a basic item."""
    return f"Thought:\nI need {count} {item}, so I get it.\n\nAction:\nget {count} {item}"


def must_craft_thought(item: str) -> str:
    """Put before the oracle's thought on the turn after a refused `get`."""
    return f"{item[:1].upper()}{item[1:]} cannot be fetched: it must be crafted. "


Turn = int | str
"""A turn of a rewritten episode: the record's turn at that index, or a reply written here."""


def replay(task_id: int, actions: list[str]) -> tuple[list[StepResult], bool]:
    """The game's answers to `actions` in a fresh game of `task_id`, and whether the goal was
    made."""
    env = TextCraftEnv()
    env.reset_sync(task_id)
    results = [env.step_sync(action) for action in actions]
    return results, any(result.reward > 0 for result in results)


def _craft_slips(actions: list[str], style: RecoveryStyle) -> list[tuple[int, list[Turn]]]:
    """(slip turn, order) for each `get` followed by a craft: the craft moved before the get
    lacks what the get brings."""
    slips = []
    for i in range(len(actions) - 1):
        if actions[i].startswith("get ") and actions[i + 1].startswith("craft "):
            order: list[Turn] = [*range(i), i + 1, *range(i, len(actions))]
            if style == "inventory":
                order.insert(i + 1, CHECK_REPLY)
            slips.append((i, order))
    return slips


def _get_slips(actions: list[str]) -> list[tuple[int, list[Turn]]]:
    """(slip turn, order) for each craft: a `get` of what it makes, put where the oracle
    starts on its ingredients."""
    slips = []
    for j, action in enumerate(actions):
        match = CRAFT.match(action)
        if match:
            count, item = match.group(1).split(" ", 1)
            s = _ingredients_start(actions, j)
            order: list[Turn] = [*range(s), uncraftable_get_reply(count, item)]
            slips.append((s, order + list(range(s, len(actions)))))
    return slips


def _ingredients_start(actions: list[str], j: int) -> int:
    """The first of the turns right before craft `j` that bring its ingredients (or theirs):
    the oracle plans depth first, so they form one block."""
    needed = set(craft_inputs(actions[j]))
    s = j
    while s > 0 and needed:
        made = _output(actions[s - 1])
        if made not in needed:
            break
        needed.discard(made)
        needed |= set(craft_inputs(actions[s - 1]))
        s -= 1
    return s


def crafted_item(action: str) -> str | None:
    """The item a craft makes (display name); None for other actions."""
    match = CRAFT.match(action)
    return match.group(1).split(" ", 1)[1] if match else None


def craft_inputs(action: str) -> Counter[str]:
    """The ingredients a craft uses (display names), with their counts; none for other
    actions."""
    match = CRAFT.match(action)
    if not match:
        return Counter()
    parts = (part.strip().split(" ", 1) for part in match.group(2).split(","))
    return Counter({name: int(count) for count, name in parts})


def _output(action: str) -> str | None:
    """The item a `get` or craft adds (display name)."""
    if match := GET.match(action):
        return match.group(1)
    return crafted_item(action)


def with_recovery(
    record: dict[str, Any],
    rng: random.Random,
    style: RecoveryStyle = "plain",
    slips: tuple[Slip, ...] = ("craft",),
) -> dict[str, Any] | None:
    """`record` (a successful TextCraft trajectory) as a chat record with one refused action
    of a kind in `slips` and its recovery; None when no slip gives a refusal and a success."""
    actions = [turn["action"] for turn in record["turns"]]
    kinds = rng.sample(slips, len(slips)) if len(slips) > 1 else slips
    for kind in kinds:
        points = _craft_slips(actions, style) if kind == "craft" else _get_slips(actions)
        rng.shuffle(points)
        for slip, order in points:
            steps = [actions[k] if isinstance(k, int) else ACTION.search(k)[1] for k in order]
            results, won = replay(record["task_id"], steps)
            if won and _refused_as_planned(kind, results[slip].observation):
                return _rewritten(record, order, results, slip, kind)
    return None


def _refused_as_planned(kind: Slip, observation: str) -> bool:
    """Whether the game refused the slip for what it lacks (a craft could also be refused for
    a malformed recipe, which is not the slip a policy makes)."""
    return observation.startswith(REFUSAL) if kind == "craft" else refused(observation)


def _rewritten(
    record: dict[str, Any], order: list[Turn], results: list[StepResult], slip: int, kind: Slip
) -> dict[str, Any]:
    """The chat record of the replayed `order` whose turn `slip` was refused."""
    turns = record["turns"]
    messages = untrained_start(record)
    recovery = slip + 1 + (order[slip + 1] == CHECK_REPLY)
    for position, (k, result) in enumerate(zip(order, results, strict=True)):
        reply = turns[k]["reply"] if isinstance(k, int) else k
        if position == recovery and reply.startswith("Thought:\n"):
            prefix = _recovery_prefix(order, turns, results, slip, kind)
            reply = "Thought:\n" + prefix + reply.removeprefix("Thought:\n")
        assistant = {"role": "assistant", "content": reply}
        if position == slip:
            assistant["loss"] = False
        messages += [assistant, {"role": "user", "content": result.observation}]
    return {"env": "textcraft", "task_id": record["task_id"], "messages": messages[:-1]}


def _recovery_prefix(
    order: list[Turn], turns: list[dict[str, Any]], results: list[StepResult], slip: int, kind: Slip
) -> str:
    """What the recovering turn's thought says about the refusal, before the oracle's."""
    if kind == "get":
        return must_craft_thought(GET.match(ACTION.search(order[slip])[1])[1])
    if order[slip + 1] != CHECK_REPLY:
        return RECOVERY_THOUGHT
    item = GET.match(turns[order[slip + 2]]["action"])[1]
    return lacking_thought(item, results[slip + 1].info["inventory"].get(item, 0))


def untrained_start(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The messages before a trajectory record's first reply, its assistant ones (the
    acknowledgement of the instructions) out of the loss, as the response mask leaves them."""
    head = _conversation_start(record)
    return [{**m, "loss": False} if m["role"] == "assistant" else m for m in head]


def _conversation_start(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The messages before the first turn's reply (instructions, acknowledgement, task)."""
    messages, turns = record["messages"], record["turns"]
    start = len(messages) - (2 * len(turns) - 1)  # the last observation is not a message
    if start < 1 or messages[start]["content"] != turns[0]["reply"]:
        raise ValueError(f"task {record['task_id']}: messages and turns do not line up")
    return messages[:start]
