"""One BabyAI episode: AgentGym's rules of play, its defects fixed unless asked to keep them.

AgentGym's behaviour (reference §1.2, `agentenv_babyai/environment.py` and `environment.py`'s
server class), reproduced exactly with `agentgym_compat=True`:

- a high-level action runs its primitive moves until one leaves the view unchanged;
- `reward` is the reward of the last primitive move, minigrid's `1 - 0.9 * steps / max_steps`
  on success; `score` adds the current `reward` on every step;
- an invalid action answers an error text and changes nothing, not even `reward`.

Defects fixed by default, each a deviation documented in docs/environments.md:

1. the prompt teaches `pick up <obj> <id>` but only `pickup` is an action: both are accepted;
2. an invalid step re-added the last reward to `score`: a step that moves nothing earns 0;
3. a success rewarded 0.5 or less (a slow one) did not end the episode, although the text
   said "The task is completed.", and a high-level action kept moving after minigrid had
   ended the episode (so "toggle and go through" the door to open undid the success): every
   minigrid ending ends the episode, at the move that ended it;
4. minigrid's step limit (`max_steps`) was ignored, so a late success earned a reward near
   or below zero: reaching it ends the episode with reward 0;
5. a refusal for an unreachable closed door printed a whole counter dict as its number;
6. the goal rewrote minigrid's "then" and "after you" to "and", hiding an order the level
   checks ("go to the ball after you go to the key" reads as if either came first; the
   OpenDoorsOrder levels fail a wrong order): the goal is minigrid's mission unchanged.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass

import numpy as np

from agenttrain.envs.babyai.levels import Task
from agenttrain.envs.babyai.view import NO_CHANGE, NOT_RECOGNISED, Pose, View, render
from agenttrain.envs.base import EnvError

COMPLETED = "\n The task is completed."
FAILED = "\n The task has failed."
OUT_OF_STEPS = "\n The step limit is reached."


def agentgym_goal(mission: str) -> str:
    """AgentGym's rewrite of minigrid's mission: "then" and "after you" become "and"."""
    return mission.replace("then", "and").replace("after you", "and")


class EpisodeFinished(EnvError):
    """A step after the episode ended (AgentGym's server refuses it too)."""


@dataclass(frozen=True)
class Outcome:
    """The result of one action, in AgentGym's terms."""

    text: str
    """The observation without the action list."""
    reward: float
    score: float
    done: bool
    moved: bool
    """Whether the action ran primitive moves (False: invalid, a check, or nothing to do)."""


class BabyAIGame:
    """The state of one episode of task `task`."""

    def __init__(self, task: Task, agentgym_compat: bool = False) -> None:
        self.task = task
        self.compat = agentgym_compat
        self.env = task.level.build()
        with contextlib.redirect_stdout(io.StringIO()):  # minigrid prints rejected samples
            # AgentGym resets a new level twice with the task's seed and plays the second;
            # minigrid <= 3.1 lets the first leave state behind (it can change the objects).
            self.env.reset(seed=task.seed)
            observation, _ = self.env.reset(seed=task.seed)
        self.image = observation["image"]
        self.goal = agentgym_goal(self.env.mission) if agentgym_compat else self.env.mission
        self.view = self._render()
        self.reward = 0.0
        self.score = 0.0
        self.done = False
        self.text = ""
        """The last observation, without the action list."""

    def first_observation(self) -> str:
        return f"Your goal: {self.goal}\n{self.view.description}\n{self.view.action_list()}"

    def observation(self, text: str) -> str:
        """`text` with the action list AgentGym appends to every observation."""
        return f"{text}\n{self.view.action_list()}"

    def step(self, action: str) -> Outcome:
        if self.done:
            raise EpisodeFinished("BabyAI: the episode has ended; reset to play again")
        outcome = self._play(self._normalise(action))
        self.text = outcome.text
        return outcome

    def _play(self, command: str) -> Outcome:
        moves = self.view.actions.get(command)
        if "check" in command:
            listed = ", ".join(self.view.actions)
            return self._stand_still(f"You can take the following actions: {listed}")
        if command == "":
            return self._stand_still(NO_CHANGE)
        if moves is None:
            return self._stand_still(self.view.refusals.get(command, NOT_RECOGNISED))
        if not moves:
            return self._stand_still(NO_CHANGE)
        return self._move(moves)

    def _normalise(self, action: str) -> str:
        command = action.lower().strip()
        if not self.compat and command.startswith("pick up "):
            command = "pickup " + command.removeprefix("pick up ")
        return command

    def _stand_still(self, text: str) -> Outcome:
        """An action that moves nothing earns 0 (AgentGym: the last reward, scored again)."""
        if not self.compat:
            self.reward = 0.0
        self.score += self.reward
        return Outcome(text, self.reward, self.score, self.done, moved=False)

    def _move(self, moves: tuple[int, ...]) -> Outcome:
        reward, terminated, truncated = 0.0, False, False
        for move in moves:
            observation, reward, terminated, truncated, _ = self.env.step(move)
            ended = not self.compat and (terminated or truncated)
            unchanged = np.array_equal(observation["image"], self.image)
            self.image = observation["image"]
            if ended or unchanged:
                break
        self.view = self._render()
        self.reward = float(reward)
        text = self.view.description + self._ending(terminated, truncated)
        self.score += self.reward
        return Outcome(text, self.reward, self.score, self.done, moved=True)

    def _ending(self, terminated: bool, truncated: bool) -> str:
        """Sets `done` and says why the episode ended, as AgentGym does or as fixed."""
        if self.compat:
            self.done = terminated and self.reward > 0.5
            return COMPLETED if terminated else ""
        if terminated:
            self.done = True
            return COMPLETED if self.reward > 0 else FAILED
        if truncated:
            self.done, self.reward = True, 0.0
            return OUT_OF_STEPS
        return ""

    def _render(self) -> View:
        env = self.env
        pose = Pose((int(env.agent_pos[0]), int(env.agent_pos[1])), int(env.agent_dir))
        return render(
            self.image, pose, env.carrying, env.agent_view_size, plain_refusals=not self.compat
        )
