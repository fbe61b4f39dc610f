"""An expert for BabyAI: minigrid's BabyAI bot, followed through AgentGym's high-level actions.

The bot (`minigrid.utils.baby_ai_bot`) plans in primitive moves with full knowledge of the
level. Each turn the oracle looks ahead along the bot's own moves and picks the high-level
action that gets furthest along them, or that ends the episode in success at once: "pickup
red ball 1" can do in one turn what the bot does in eight moves. The bot keeps its own copy
of the world, kept in step with the episode.

It reads the task from the conversation, so it plays through an HTTP server as well as
in-process: the first observation names the task (it is looked up among the split tasks,
which a few share, e.g. 11 of the 90 test tasks), and each later observation rules out the
look-alikes it does not match. Levels the bot or AgentGym's actions cannot solve are listed
in docs/environments.md.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache

from minigrid.envs.babyai.core.roomgrid_level import RoomGridLevel
from minigrid.utils.baby_ai_bot import BabyAIBot

from agenttrain.envs.actions import Oracle, PlannedAction
from agenttrain.envs.babyai.game import BabyAIGame, agentgym_goal
from agenttrain.envs.babyai.levels import splits, task
from agenttrain.envs.babyai.view import CHECK

TASK_MARKER = "Your goal: "
LOOKAHEAD = 64
"""Primitive moves of the bot's plan that a high-level action is matched against."""
PLAN_LIMIT = 100
"""Turns after which an open-loop plan gives up."""
BELIEFS_KEPT = 1024
"""Conversations whose state the oracle remembers (one per episode in flight suffices)."""


class UnknownBabyAITask(ValueError):
    """A first observation that is no task of the splits."""


Signature = tuple[bytes, tuple | None, tuple]


def _signature(env: RoomGridLevel) -> Signature:
    """The level's state apart from the agent's pose: the grid, what is carried, and which
    parts of the mission are done ("go to the ball after you go to the key")."""
    carried = env.carrying.encode() if env.carrying is not None else None
    return env.grid.encode().tobytes(), carried, _mission_progress(env.instrs)


def _mission_progress(instr: object) -> tuple:
    parts = (getattr(instr, name, None) for name in ("instr_a", "instr_b"))
    done = (getattr(instr, "a_done", None), getattr(instr, "b_done", None))
    return (done, *(_mission_progress(part) for part in parts if part is not None))


def _pose(env: RoomGridLevel) -> tuple[int, int, int]:
    return int(env.agent_pos[0]), int(env.agent_pos[1]), int(env.agent_dir)


@dataclass(frozen=True)
class _Mark:
    """The world after one move of the bot's plan."""

    signature: Signature
    pose: tuple[int, int, int]


class _Guide:
    """minigrid's bot in a private copy of the world, in step with the episode's game."""

    def __init__(self, game: BabyAIGame) -> None:
        self.world = copy.deepcopy(game.env)
        self.bot = BabyAIBot(self.world)

    def lookahead(self) -> list[_Mark]:
        """The world after each of the bot's next moves (up to `LOOKAHEAD` or the end)."""
        world, bot = copy.deepcopy((self.world, self.bot))
        marks: list[_Mark] = []
        try:
            for _ in range(LOOKAHEAD):
                _, _, terminated, _, _ = world.step(bot.replan())
                marks.append(_Mark(_signature(world), _pose(world)))
                if terminated:
                    break
        except Exception:  # the bot gives up on some levels (KeyInBox); keep what it planned
            pass
        return marks

    def advanced(self, moves: int, game: BabyAIGame) -> _Guide:
        """A guide `moves` bot moves further on, standing where the episode's agent stands."""
        guide = copy.copy(self)
        guide.world, guide.bot = copy.deepcopy((self.world, self.bot))
        for _ in range(moves):
            guide.world.step(guide.bot.replan())
        guide.world.agent_pos = game.env.agent_pos
        guide.world.agent_dir = game.env.agent_dir
        return guide


@dataclass
class _Candidate:
    """A task the conversation so far is consistent with, and its state."""

    task_id: int
    game: BabyAIGame
    guide: _Guide | None = None


@dataclass
class _Decision:
    step: PlannedAction
    guide: _Guide | None
    """The driving candidate's guide after the step (None: rebuild it)."""


@dataclass
class _Belief:
    candidates: list[_Candidate]
    decision: _Decision = field(init=False)

    def __post_init__(self) -> None:
        self.decision = _decide(self.candidates[0])


def _decide(candidate: _Candidate) -> _Decision:
    """The high-level action that wins at once, or takes the bot's plan furthest. A bot that
    was carried along (and may have lost its thread) is replaced by a fresh one if its plan
    leads nowhere."""
    game = candidate.game
    if game.done:
        return _Decision(PlannedAction("The task is completed.", CHECK), None)
    guides = [candidate.guide] if candidate.guide is not None else []
    for guide in [*guides, _Guide(game)]:
        decision = _best_action(game, guide)
        if decision is not None:
            return decision
    thought = "I see no way forward; I check the available actions."
    return _Decision(PlannedAction(thought, CHECK), None)


def _best_action(game: BabyAIGame, guide: _Guide) -> _Decision | None:
    marks = guide.lookahead()
    here = _signature(game.env)
    best: tuple[int, int, str] | None = None  # (progress, -moves, action)
    for action, moves in game.view.actions.items():
        if action == CHECK:
            continue
        trial = copy.deepcopy(game)
        outcome = trial.step(action)
        if outcome.done and outcome.reward > 0:
            thought = f"My goal is to {game.goal}; {action} achieves it."
            return _Decision(PlannedAction(thought, action), None)
        if outcome.done:
            continue  # a failure (a door opened out of order) or the step limit
        changed = _signature(trial.env) != here
        walked = _pose(trial.env)[:2] != _pose(game.env)[:2]
        if not changed and _pose(trial.env) == _pose(game.env):
            continue  # moved nothing: never progress, however the bot's plan loops back
        progress = _progress(marks, trial, changed, walked)
        if progress and (best is None or (progress, -len(moves)) > best[:2]):
            best = (progress, -len(moves), action)
    if best is None:
        return None
    action = best[2]
    after = copy.deepcopy(game)
    after.step(action)
    thought = f"My goal is to {game.goal}. Next I {action}."
    return _Decision(PlannedAction(thought, action), guide.advanced(best[0], after))


def _progress(marks: Sequence[_Mark], trial: BabyAIGame, changed: bool, walked: bool) -> int:
    """How many of the bot's moves the trial action covers: the last plan point with the
    same world and pose; after a walk, one on the same cell, less the turns the heading is
    off; once the action changed the world (picked up the key the bot was going for), the
    last point with that world wherever the agent stands. 0: none. (A turn on the spot must
    match exactly, or the oracle would turn back and forth wherever the plan passes twice.)"""
    signature, pose = _signature(trial.env), _pose(trial.env)
    for index in range(len(marks) - 1, -1, -1):
        mark = marks[index]
        if mark.signature != signature:
            continue
        if changed or mark.pose == pose:
            return index + 1
        if walked and mark.pose[:2] == pose[:2]:
            turns = min((mark.pose[2] - pose[2]) % 4, (pose[2] - mark.pose[2]) % 4)
            return max(index + 1 - turns, 0)
    return 0


def _advance(candidate: _Candidate, decision: _Decision | None, action: str) -> _Candidate:
    game = copy.deepcopy(candidate.game)
    game.step(action)
    guide = decision.guide if decision is not None else None
    return _Candidate(candidate.task_id, game, guide)


@cache
def _first_observations() -> dict[str, tuple[int, ...]]:
    """Every split task's first observation (with the goal as shown by default and as
    AgentGym rewrites it) -> the ids that show it."""
    found: dict[str, list[int]] = {}
    for task_id in sorted({i for ids in splits().values() for i in ids}):
        game = BabyAIGame(task(task_id))
        view = game.first_observation().split("\n", 1)[1]
        for goal in dict.fromkeys((game.goal, agentgym_goal(game.goal))):
            found.setdefault(f"{TASK_MARKER}{goal}\n{view}", []).append(task_id)
    return {text: tuple(ids) for text, ids in found.items()}


class _Beliefs:
    """What the oracle knows after each conversation prefix, remembered for the episodes in
    flight, rebuilt from the first observation when forgotten."""

    def __init__(self) -> None:
        self._known: OrderedDict[tuple[str, ...], _Belief] = OrderedDict()

    def after(self, observations: tuple[str, ...]) -> _Belief:
        belief = self._known.get(observations)
        if belief is None:
            belief = self._build(observations)
            self._known[observations] = belief
            if len(self._known) > BELIEFS_KEPT:
                self._known.popitem(last=False)
        self._known.move_to_end(observations)
        return belief

    def _build(self, observations: tuple[str, ...]) -> _Belief:
        if len(observations) == 1:
            ids = _first_observations().get(observations[0])
            if not ids:
                raise UnknownBabyAITask(
                    "the BabyAI oracle knows the tasks of the train, val and test splits; "
                    f"this first observation is none of them: {observations[0][:120]!r}"
                )
            return _Belief([_Candidate(i, BabyAIGame(task(i))) for i in ids])
        parent = self.after(observations[:-1])
        action = parent.decision.step.action
        driver, *others = parent.candidates
        moved = [_advance(driver, parent.decision, action)]
        moved += [_advance(other, None, action) for other in others]
        shown = observations[-1]
        matching = [c for c in moved if c.game.observation(c.game.text) == shown]
        return _Belief(matching or moved)


_BELIEFS = _Beliefs()


def follow(observations: Sequence[str]) -> PlannedAction:
    """The next step, given the episode's observations so far (the first one first)."""
    return _BELIEFS.after(tuple(observations)).decision.step


def plan_for_observation(observation: str) -> list[PlannedAction]:
    """An open-loop plan for the first task that shows `observation` first."""
    ids = _first_observations().get(observation)
    if not ids:
        raise UnknownBabyAITask(f"no split task starts with: {observation[:120]!r}")
    return plan_task(ids[0])


def plan_task(task_id: int) -> list[PlannedAction]:
    """The oracle's steps for task `task_id`, played out in-process."""
    candidate = _Candidate(task_id, BabyAIGame(task(task_id)))
    steps: list[PlannedAction] = []
    while not candidate.game.done and len(steps) < PLAN_LIMIT:
        decision = _decide(candidate)
        steps.append(decision.step)
        if decision.step.action == CHECK:
            break
        candidate = _advance(candidate, decision, decision.step.action)
    return steps


ORACLE = Oracle(task_marker=TASK_MARKER, plan=plan_for_observation, follow=follow)
