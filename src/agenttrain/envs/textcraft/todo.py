"""Demonstrations that try `get` before they know, and carry the plan as a to-do list.

After a 2-epoch SFT no model solves a depth-1 goal whose recipe lists two or three
ingredients (0 of 32 test episodes, docs/results.md). In its first turn it quotes the goal's
recipe, then a second, made-up one for a basic ingredient ("The recipe for white stained
glass is ...") and follows it. The oracle's thoughts decide up front whether each ingredient
is basic, a look-up the 135M model cannot make in a 40-line recipe list.

`with_todo` rewrites an oracle episode so that the look-up is never made in the head: every
ingredient is first fetched with `get`, and only when the game refuses it ("Could not find
stick") does the next thought quote that item's recipe and plan its ingredients. Each
thought carries what is left to do (`To do: get 5 glass, get 3 obsidian, craft beacon.`):
the action is the list's first entry, and the next thought copies the rest, so the plan
never has to be rebuilt from a recipe quoted turns ago. Every observation comes from
replaying the actions in the real game; every reply is trained, the refused `get`s too,
because trying is the behaviour taught.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agenttrain.envs.actions import PlannedAction
from agenttrain.envs.textcraft.game import CRAFT, NOT_ENOUGH, refused
from agenttrain.envs.textcraft.oracle import Block, crafting_blocks, goal_from_observation
from agenttrain.envs.textcraft.quotes import as_chat, quote
from agenttrain.envs.textcraft.recovery import RECOVERY_THOUGHT, must_craft_thought, replay


@dataclass(frozen=True)
class Probe:
    """A `get` of an item the plan crafts, sent before the policy knows it is crafted."""

    block: Block

    @property
    def action(self) -> str:
        return f"get {self.block.amount} {self.block.name}"


Event = Probe | PlannedAction


def probing_events(actions: list[PlannedAction], blocks: list[Block]) -> list[Event]:
    """The oracle's actions with a probe before each crafted item's first action (outer
    items first); the goal (the first block) is known to be crafted and is not probed."""
    probes: dict[int, list[Probe]] = {}
    for block in blocks[1:]:
        probes.setdefault(block.start, []).append(Probe(block))
    events: list[Event] = []
    for index, action in enumerate(actions):
        events += probes.get(index, [])
        events.append(action)
    return events


def todo_list(events: list[Event], position: int) -> list[str]:
    """What is left to do before event `position`, as the policy knows it: an item not yet
    probed is one `get`, whatever its crafting takes."""
    first_event = _first_events(events)
    entries, k = [], position
    while k < len(events):
        event = events[k]
        if isinstance(event, Probe):
            entries.append(event.action)
            k = first_event.get(event.block.end, len(events))
            continue
        entries.append(_entry(event.action))
        k += 1
    return _batched(entries)


def _batched(entries: list[str]) -> list[str]:
    """Repeated crafts of one item as one entry, `craft stick 3 times`: the first SFT on
    to-do replies that listed each batch wrote `craft stick, craft stick, ...` until the
    token limit in 119 of 400 test episodes."""
    merged: list[tuple[str, int]] = []
    for entry in entries:
        if merged and entry.startswith("craft ") and merged[-1][0] == entry:
            merged[-1] = (entry, merged[-1][1] + 1)
        else:
            merged.append((entry, 1))
    return [entry if times == 1 else f"{entry} {times} times" for entry, times in merged]


def _first_events(events: list[Event]) -> dict[int, int]:
    """Oracle action index -> the index of the first event that belongs to it (its probes,
    else itself)."""
    first: dict[int, int] = {}
    action_index = 0
    for k, event in enumerate(events):
        first.setdefault(action_index, k)
        if not isinstance(event, Probe):
            action_index += 1
    return first


def _entry(action: str) -> str:
    """A to-do entry: a `get` as sent, a craft by the item it makes."""
    match = CRAFT.match(action)
    return f"craft {match.group(1).split(' ', 1)[1]}" if match else action


def todo_reply(prefix: str, todo: list[str], action: str) -> str:
    """A react reply whose thought is `prefix` and the to-do list, and whose action is
    `action` (the list's first entry, in full)."""
    return f"Thought:\n{prefix}To do: {', '.join(todo)}.\n\nAction:\n{action}"


@dataclass(frozen=True)
class Turn:
    """One reply of a to-do demonstration: its text, its action, and whether it is trained."""

    reply: str
    action: str
    trained: bool = True
    refused: bool = False
    """Whether the game must refuse it (a probe, or the slip)."""


def craft_slips(events: list[Event]) -> list[int]:
    """Positions of the basic `get`s right before a craft: moving the craft first is the
    slip `with_todo` can show ("Could not find enough items"), and what most failed episodes
    of to-do SFT models did after a miscounted batch (docs/results.md)."""
    return [
        k
        for k in range(len(events) - 1)
        if not isinstance(events[k], Probe)
        and events[k].action.startswith("get ")
        and CRAFT.match(events[k + 1].action)
    ]


def todo_turns(events: list[Event], goal: Block, slip: int | None = None) -> list[Turn]:
    """The replies of a to-do demonstration of `events`; with `slip`, the craft after that
    `get` is first sent too early (untrained, refused), and the next reply recovers."""
    turns: list[Turn] = []
    prefix = quote(goal.name, goal.command)
    for k, event in enumerate(events):
        todo = todo_list(events, k)
        if k == slip:
            craft = events[k + 1].action
            turns.append(Turn(todo_reply(prefix, todo[1:], craft), craft, False, True))
            prefix = RECOVERY_THOUGHT
        probe = isinstance(event, Probe)
        turns.append(Turn(todo_reply(prefix, todo, event.action), event.action, refused=probe))
        prefix = ""
        if isinstance(event, Probe):
            block = event.block
            prefix = must_craft_thought(block.name) + quote(block.name, block.command)
    return turns


@dataclass(frozen=True)
class TodoPlan:
    """What a to-do demonstration of a record is built from."""

    head: list[dict[str, Any]]
    """The messages up to and including the task (instructions, acknowledgement, goal)."""
    events: list[Event]
    goal: Block
    from_stock: bool
    """Whether an ingredient comes wholly from an earlier craft's leftovers."""


def todo_plan(record: dict[str, Any]) -> TodoPlan:
    """The to-do plan of `record` (a TextCraft demonstration: trajectory or chat record)."""
    messages = [dict(m) for m in as_chat(record)]
    start = next(i for i, m in enumerate(messages) if "Goal: craft" in m.get("content", ""))
    goal = goal_from_observation(messages[start]["content"])
    actions, blocks, from_stock = crafting_blocks(goal)
    return TodoPlan(messages[: start + 1], probing_events(actions, blocks), blocks[0], from_stock)


def with_todo(record: dict[str, Any], slip: int | None = None) -> dict[str, Any] | None:
    """`record` (a successful TextCraft demonstration) replayed as a chat record that probes
    with `get` and carries a to-do list, with `slip` one refused craft (`craft_slips` of its
    plan's events) and its recovery; None when the replay does not go as planned."""
    plan = todo_plan(record)
    if plan.from_stock:  # the to-do would list an ingredient that is never fetched
        return None
    turns = todo_turns(plan.events, plan.goal, slip)
    results, won = replay(record["task_id"], [turn.action for turn in turns])
    as_planned = all(
        refused(result.observation) == turn.refused
        and (turn.trained or result.observation.startswith(NOT_ENOUGH))
        for turn, result in zip(turns, results, strict=True)
    )
    if not (won and as_planned):
        return None
    messages = plan.head
    for turn, result in zip(turns, results, strict=True):
        messages.append({"role": "assistant", "content": turn.reply})
        if not turn.trained:
            messages[-1]["loss"] = False
        messages.append({"role": "user", "content": result.observation})
    return {"env": "textcraft", "task_id": record["task_id"], "messages": messages[:-1]}
