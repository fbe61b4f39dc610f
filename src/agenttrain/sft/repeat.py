"""Repeating the demonstrations of a rare kind of task in the SFT mix (`data.repeat`).

A seeded sample of demonstrations follows the split's mix of tasks. TextCraft's training
split holds 12 depth-1 goals whose recipe lists two or three basic ingredients among 390, so
the recipe's 160 hold three or four of them, and the SFT model solves none of the test
split's such goals; GRPO then never sees a group on them split (docs/results.md).
`data.repeat.where` names the kind of task by the attributes the environment describes
(`depth=1,ingredients>=2`, the attributes `agenttrain compare --by` groups by):
every conversation of that kind in the files is kept, `times` copies each, and the rest of
`data.limit` is a seeded sample of the others, so the SFT's size and cost stay the same.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agenttrain.sft.data import Conversation, DataError, sample_limit

OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    "!=": operator.ne,
    "=": operator.eq,
    ">": operator.gt,
    "<": operator.lt,
}
CONDITION = re.compile(r"^\s*(?P<name>[A-Za-z_]\w*)\s*(?P<op>>=|<=|!=|=|>|<)\s*(?P<value>.+?)\s*$")


@dataclass(frozen=True)
class Condition:
    name: str
    op: str
    value: int | str

    def holds(self, attributes: Mapping[str, Any]) -> bool:
        found = attributes.get(self.name)
        if found is None:
            return False
        if isinstance(self.value, int) and not isinstance(found, int):
            return False
        if isinstance(self.value, str):
            found = str(found)
        return OPERATORS[self.op](found, self.value)


def parse_where(text: str) -> list[Condition]:
    """`depth=1,ingredients>=2` -> its conditions, all of which must hold; numbers compare
    as numbers, anything else as text (`goal=dropper`)."""
    conditions = []
    for part in text.split(","):
        match = CONDITION.match(part)
        if match is None:
            raise DataError(
                f"data.repeat.where: cannot read {part.strip()!r}; write conditions such as "
                "depth=1,ingredients>=2 (=, !=, <, <=, >, >=; comma means and)"
            )
        value = match["value"]
        conditions.append(
            Condition(match["name"], match["op"], int(value) if value.isdigit() else value)
        )
    return conditions


def with_repeats(
    pool: list[Conversation],
    sample: list[Conversation],
    where: str,
    times: int,
    limit: int | None,
    describe: Callable[[str], Mapping[str, Any]],
    seed: str,
) -> tuple[list[Conversation], int]:
    """`sample` (drawn from `pool`) with every conversation of `pool` that matches `where`
    in `times` copies, and, within `limit`, a seeded sample of its other conversations;
    in file order, copies side by side; and how many matched. A `where` that matches nothing
    is an error."""
    conditions = parse_where(where)
    attributes = {id(c): _attributes(c, describe) for c in pool}
    chosen = {id(c) for c in pool if all(k.holds(attributes[id(c)]) for k in conditions)}
    if not chosen:
        known = sorted({name for found in attributes.values() for name in found})
        raise DataError(
            f"data.repeat.where={where!r} matches none of the {len(pool)} conversations; "
            f"their attributes: {', '.join(known) or 'none (no task described)'}"
        )
    repeated = len(chosen) * times
    others = [c for c in sample if id(c) not in chosen]
    if limit is not None:
        if repeated > limit:
            raise DataError(
                f"data.repeat: {len(chosen)} conversations match {where!r}, x{times} = "
                f"{repeated}, more than data.limit={limit}; lower data.repeat.times"
            )
        others = sample_limit(others, limit - repeated, f"{seed}/repeat")
    kept = {id(c) for c in others} | chosen
    mixed = [c for c in pool if id(c) in kept for _ in range(times if id(c) in chosen else 1)]
    return mixed, len(chosen)


def _attributes(conversation: Conversation, describe: Callable[[str], Mapping[str, Any]]) -> dict:
    """What `describe` reads from the first message of the conversation's opening that it
    understands (the instructions come first and name no task)."""
    for text in conversation.opening:
        found = describe(text)
        if found:
            return dict(found)
    return {}
