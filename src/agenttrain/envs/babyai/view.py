"""What the agent is told it sees, and the high-level actions it may take from there.

A faithful re-implementation of AgentGym's BabyAI text interface (reference: agentgym.md
§1.2, read from `agentenv_babyai/environment.py`): the objects of the 7x7 egocentric view
listed nearest first and numbered per name, the wall or box straight ahead, what is carried;
and every high-level action ("go to red ball 1", "toggle and go through red locked door 1")
compiled to minigrid's primitive moves by AgentGym's breadth-first search over the visible
cells. Its quirks are kept on purpose, because an agent trained on AgentGym has seen exactly
these strings and moves: action numbers count only reachable objects (so they can differ
from the description's), a door never blocks a path, and a refusal for an unreachable door
quotes a whole counter dict. `plain_refusals=True` fixes that last text only.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from minigrid.core.constants import DIR_TO_VEC, IDX_TO_COLOR, IDX_TO_OBJECT
from minigrid.core.world_object import WorldObj

LEFT, RIGHT, FORWARD, PICKUP, DROP, TOGGLE = range(6)
"""minigrid's primitive actions."""
STATES = ("open", "closed", "locked")
"""minigrid's door states by index (other objects encode 0)."""
SHOWN = frozenset({"door", "key", "ball", "box", "goal", "lava", "wall"})
BLOCKING = ("wall", "box", "lava", "ball", "key")
"""Words that make a named object an obstacle to paths and drops (AgentGym matches substrings)."""
CHECK = "check available actions"
NOT_RECOGNISED = "The action is not recognized. Please check valid actions."
NO_CHANGE = "No change in state."

Position = tuple[int, int]


@dataclass(frozen=True)
class Seen:
    """One object in view: its name ("red ball", "grey closed door"), cell and step distance."""

    name: str
    kind: str
    pos: Position
    distance: int


@dataclass(frozen=True)
class Pose:
    pos: Position
    direction: int

    @property
    def forward(self) -> Position:
        dx, dy = DIR_TO_VEC[self.direction]
        return (self.pos[0] + int(dx), self.pos[1] + int(dy))

    def offset(self, cell: Position) -> tuple[int, int]:
        """Steps in front of and to the right of the agent."""
        rel = (cell[0] - self.pos[0], cell[1] - self.pos[1])
        front, right = DIR_TO_VEC[self.direction], DIR_TO_VEC[(self.direction + 1) % 4]
        return int(np.dot(front, rel)), int(np.dot(right, rel))


@dataclass(frozen=True)
class View:
    """The rendered view: the description and the action table of this state."""

    description: str
    actions: dict[str, tuple[int, ...]]
    """Action text -> the primitive moves it runs, in AgentGym's order."""
    refusals: dict[str, str]
    """Why an action that is not available was refused (AgentGym's wording)."""

    def action_list(self) -> str:
        """The `Available actions: [...]` line AgentGym appends to every observation."""
        return "Available actions: [" + ", ".join(f'"{a}"' for a in self.actions) + "]"


def blocks(name: str) -> bool:
    return any(word in name for word in BLOCKING)


@dataclass(frozen=True)
class _Frame:
    """The cells the view covers, in absolute coordinates (AgentGym's bounds, one-sided)."""

    xs: range
    ys: range


def _frame(pose: Pose, view_size: int) -> tuple[np.ndarray, _Frame]:
    front = DIR_TO_VEC[pose.direction]
    right = DIR_TO_VEC[(pose.direction + 1) % 4]
    top_left = np.array(pose.pos) + front * (view_size - 1) - right * (view_size // 2)
    corner = top_left + view_size * (right - front)
    spans = []
    for axis in (0, 1):
        start, end = int(top_left[axis]), int(corner[axis])
        spans.append(range(end, start + 1) if end < start else range(start, end))
    return top_left, _Frame(*spans)


def _objects_in_view(
    image: np.ndarray, pose: Pose, view_size: int, top_left: np.ndarray
) -> list[Seen]:
    front = DIR_TO_VEC[pose.direction]
    right = DIR_TO_VEC[(pose.direction + 1) % 4]
    found = []
    for row in range(view_size):  # farthest row first, then left to right: the numbering order
        for col in range(view_size):
            x, y = (int(v) for v in top_left - front * row + right * col)
            distance = abs(pose.pos[0] - x) + abs(pose.pos[1] - y)
            if x < 0 or y < 0 or distance == 0:  # the agent's own cell shows what it carries
                continue
            kind = IDX_TO_OBJECT[int(image[col, row, 0])]
            if kind not in SHOWN:
                continue
            color = IDX_TO_COLOR[int(image[col, row, 1])]
            state = STATES[int(image[col, row, 2])] if kind == "door" else ""
            name = f"{color} {state} door" if kind == "door" else f"{color} {kind}"
            found.append(Seen(name, kind, (x, y), distance))
    return sorted(found, key=lambda seen: seen.distance)


def find_path(
    start: Pose, target: Position, obstacles: Sequence[Seen], frame: _Frame, arrive: bool
) -> list[int] | None:
    """Primitive moves from `start` onto `target` (`arrive`) or to face it, else None.

    AgentGym's search, kept move for move because its result decides where the agent ends
    up: breadth first over (cell, direction), trying forward, left, right; a state counts as
    visited when taken from the queue, so a later parent can overwrite an earlier one; only
    walls, boxes, balls, keys and lava block, and only cells of the view are entered.
    """
    parents: dict[Pose, tuple[Pose, int]] = {}
    visited: set[Pose] = set()
    queue = deque([start])
    while queue:
        pose = queue.popleft()
        visited.add(pose)
        reached = pose.pos == target if arrive else pose.forward == target
        if reached:
            path = []
            while pose != start:
                pose, move = parents[pose]
                path.append(move)
            return path[::-1]
        for move in (FORWARD, LEFT, RIGHT):
            step = _after(pose, move)
            if obstacles and _is_obstacle(step, obstacles, frame, visited):
                continue
            queue.append(step)
            parents[step] = (pose, move)
    return None


def _after(pose: Pose, move: int) -> Pose:
    if move == LEFT:
        return Pose(pose.pos, (pose.direction - 1) % 4)
    if move == RIGHT:
        return Pose(pose.pos, (pose.direction + 1) % 4)
    return Pose(pose.forward, pose.direction)


def _is_obstacle(step: Pose, obstacles: Sequence[Seen], frame: _Frame, visited: set) -> bool:
    if step.pos[0] not in frame.xs or step.pos[1] not in frame.ys or step in visited:
        return True
    return any(seen.pos == step.pos and blocks(seen.name) for seen in obstacles)


def render(
    image: np.ndarray,
    pose: Pose,
    carrying: WorldObj | None,
    view_size: int,
    plain_refusals: bool = False,
) -> View:
    """The description and action table of the state whose egocentric `image` is given."""
    top_left, frame = _frame(pose, view_size)
    seen = _objects_in_view(image, pose, view_size, top_left)
    barriers = sorted(
        (
            (pose.offset(s.pos)[0], s.kind)
            for s in seen
            if s.kind in ("box", "wall") and pose.offset(s.pos)[1] == 0
        ),
        key=lambda barrier: barrier[0],
    )
    description = _describe(seen, pose, barriers, carrying)
    table = _ActionTable(pose, seen, frame, plain_refusals)
    table.moves(barriers)
    if carrying is None:
        table.pickups(seen)
    table.drop(seen, carrying)
    table.doors(seen, carrying)
    table.goal(seen)
    table.go_tos(seen)
    table.actions[CHECK] = ()
    return View(description, table.actions, table.refusals)


def _describe(
    seen: Sequence[Seen], pose: Pose, barriers: Sequence[tuple[int, str]], carrying: WorldObj | None
) -> str:
    if seen:
        text = "In front of you in this room, you can see several objects: "
        counts: dict[str, int] = {}
        for s in seen:
            if "wall" in s.name:
                continue
            counts[s.name] = counts.get(s.name, 0) + 1
            front, right = pose.offset(s.pos)
            if right == 0:
                where = f"right in front of you {front} steps away. "
            else:
                side = "right" if right > 0 else "left"
                where = f"{front} steps in front of you and {abs(right)} steps to your {side}. "
            text += f"There is a {s.name} {counts[s.name]} {where} "
    else:
        text = "You cannot see any objects within sight."
    text += "The room has walls around you. "
    if barriers:
        distance, kind = barriers[0]
        text += f"You are facing a {kind} {distance} steps away. "
    if carrying is None:
        return text + "You are not carrying anything."
    return text + f"You are carrying a {carrying.color} {carrying.type}."


class _ActionTable:
    """Builds the ordered action table and the refusals, section by section as AgentGym does."""

    def __init__(
        self, pose: Pose, obstacles: Sequence[Seen], frame: _Frame, plain_refusals: bool
    ) -> None:
        self.pose = pose
        self.obstacles = obstacles
        self.frame = frame
        self.plain = plain_refusals
        self.actions: dict[str, tuple[int, ...]] = {"turn left": (LEFT,), "turn right": (RIGHT,)}
        self.refusals: dict[str, str] = {}

    def path(self, target: Position, arrive: bool) -> list[int] | None:
        return find_path(self.pose, target, self.obstacles, self.frame, arrive)

    def moves(self, barriers: Sequence[tuple[int, str]]) -> None:
        if not barriers or barriers[0][0] > 1:
            self.actions["move forward"] = (FORWARD,)
        else:
            self.refusals["move forward"] = (
                "There is a barrier in front of you, you can't move forward."
            )

    def pickups(self, seen: Iterable[Seen]) -> None:
        pickable = (s for s in seen if not any(w in s.name for w in ("wall", "door", "goal")))
        self._numbered("pickup", "pickup", pickable, then=(PICKUP,))

    def go_tos(self, seen: Iterable[Seen]) -> None:
        reachable = (s for s in seen if "wall" not in s.name and "goal" not in s.name)
        self._numbered("go to", "go to", reachable, then=())

    def _numbered(self, verb: str, wording: str, seen: Iterable[Seen], then: tuple) -> None:
        """ "<verb> <name> <n>", numbered over the reachable objects of each name only."""
        counts: dict[str, int] = {}
        for s in seen:
            path = self.path(s.pos, arrive=False)
            first = f"{verb} {s.name} 1"
            if path is not None:
                counts[s.name] = 1 if first not in self.actions else counts[s.name] + 1
                self.actions[f"{verb} {s.name} {counts[s.name]}"] = (*path, *then)
                continue
            number = 1 if first not in self.actions else counts[s.name] + 1
            self.refusals[f"{verb} {s.name} {number}"] = (
                f"You cannot {wording} {s.name} {number}, as there is no path leading to it."
            )

    def drop(self, seen: Iterable[Seen], carrying: WorldObj | None) -> None:
        if carrying is None:
            self.refusals["drop"] = "You cannot drop the object, as you are not carrying anything."
        elif any(s.pos == self.pose.forward and blocks(s.name) for s in seen):
            self.refusals["drop"] = (
                "You cannot drop the object, as there is already an object in front of you."
            )
        else:
            self.actions["drop"] = (DROP,)

    def doors(self, seen: Iterable[Seen], carrying: WorldObj | None) -> None:
        counts: dict[str, int] = {}
        for s in seen:
            if "door" in s.name:
                counts[s.name] = counts.get(s.name, 0) + 1
            number = counts.get(s.name, 0)
            if "open door" in s.name:
                self._go_through(s, number)
            elif "closed door" in s.name:
                self._toggle_through(s, number, counts)
                self.refusals[f"go through {s.name} {number}"] = (
                    f"You cannot go through {s.name} {number}, as it is closed. "
                    "You should toggle it first."
                )
            elif "locked door" in s.name:
                reason = self._key_problem(s.name, carrying)
                if reason:
                    self.refusals[f"toggle and go through {s.name} {number}"] = (
                        f"You cannot toggle and go through {s.name} {number}, as {reason}."
                    )
                else:
                    self._toggle_through(s, number, counts)

    def _go_through(self, door: Seen, number: int) -> None:
        path = self.path(door.pos, arrive=True)
        if path is not None:
            self.actions[f"go through {door.name} {number}"] = tuple(path)
        else:
            self.refusals[f"go through {door.name} {number}"] = (
                f"You cannot go through {door.name} {number}, as there is no path leading to it."
            )

    def _toggle_through(self, door: Seen, number: int, counts: dict[str, int]) -> None:
        path = self.path(door.pos, arrive=False)
        action = f"toggle and go through {door.name} {number}"
        if path is None:
            quoted = number if self.plain else dict(counts)  # AgentGym prints its counter dict
            self.refusals[action] = (
                f"You cannot toggle and go through {door.name} {quoted}, "
                "as there is no path leading to it."
            )
            return
        self.actions[action] = (*path, TOGGLE, FORWARD)
        if not path:
            self.actions["toggle"] = (TOGGLE,)

    @staticmethod
    def _key_problem(door: str, carrying: WorldObj | None) -> str | None:
        if carrying is None or carrying.type != "key":
            return "you are not carrying a key"
        if carrying.color != door.split(" ")[0]:
            return "the color of the key you are carrying does not match the color of door"
        return None

    def goal(self, seen: Iterable[Seen]) -> None:
        for s in seen:
            if "goal" not in s.name:
                continue
            path = self.path(s.pos, arrive=True)
            if path is not None:
                self.actions["go to goal"] = tuple(path)
            else:
                self.refusals["go to goal"] = (
                    "You cannot go to the goal, as there is no path leading to it."
                )
