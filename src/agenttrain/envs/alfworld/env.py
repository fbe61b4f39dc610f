"""ALFWorld in-process, when the user has `alfworld` and its data (`$ALFWORLD_DATA`).

It plays AgentGym's games (`games.py`) as AgentGym's server does (reference: agentgym.md
section 1.4): TextWorld's text engine through `alfworld`, the welcome banner dropped from the
first observation, "You arrive at loc N. " dropped from step observations, reward 1.0 exactly
when the game is won, and the admissible commands answered as `available_actions`. The agent's
first observation is AgentGym's client's: the observation, then `AVAILABLE ACTIONS: a,b,...`.
Each game runs in a worker process (TextWorld is not thread-safe and holds a game engine).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from agenttrain.envs.agentgym import ALFWORLD
from agenttrain.envs.alfworld.games import game_file
from agenttrain.envs.alfworld.requirements import require
from agenttrain.envs.base import (
    EnvError,
    EnvironmentNotReset,
    LocalEnvironment,
    Observation,
    StepResult,
)

MAX_GAME_STEPS = 50
"""TextWorld's own episode limit in AgentGym's config (dagger max_nb_steps_per_episode)."""

ARRIVAL = "You arrive at loc "

SPEC = replace(
    ALFWORLD,
    protocol=replace(
        ALFWORLD.protocol,
        reset_fields=("id", "observation", "available_actions", "task_type"),
        step_info_fields=("available_actions",),
        finished_error="The task with environment {id} has finished.",
    ),
    requirements="alfworld (PyPI) and its game files ($ALFWORLD_DATA); runs in worker processes",
)


class TextWorldBatch(Protocol):
    """What `AlfredTWEnv.init_env(batch_size=1)` returns: a batch of one TextWorld game."""

    def reset(self) -> tuple[Sequence[str], Mapping[str, Sequence[Any]]]: ...

    def step(
        self, commands: list[str]
    ) -> tuple[Sequence[str], Sequence[float], Sequence[bool], Mapping[str, Sequence[Any]]]: ...

    def close(self) -> None: ...


def alfworld_config(max_steps: int) -> dict[str, Any]:
    """The parts of AgentGym's `base_config.yaml` that `init_env` reads, for evaluation games:
    no domain randomisation, no expert plan (dagger outside training)."""
    return {
        "env": {
            "domain_randomization": False,
            "expert_type": "handcoded",
            "goal_desc_human_anns_prob": 0.0,
        },
        "general": {"training_method": "dagger"},
        "dagger": {"training": {"max_nb_steps_per_episode": max_steps}},
    }


def open_game(path: Path, max_steps: int) -> TextWorldBatch:
    """One game as AgentGym opens it: alfworld's TextWorld env without its constructor, which
    would scan every game of a split to build a list we already have."""
    from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv

    env = AlfredTWEnv.__new__(AlfredTWEnv)
    env.config = alfworld_config(max_steps)
    env.train_eval = "eval_out_of_distribution"
    env.game_files, env.num_games = [str(path)], 1
    return env.init_env(batch_size=1)


def first_observation(text: str) -> str:
    """The reset text without its first paragraph (TextWorld's welcome banner)."""
    return "\n".join(text.split("\n\n")[1:])


def step_observation(text: str) -> str:
    return text[text.find(". ") + 2 :] if text.startswith(ARRIVAL) else text


def with_actions(observation: str, actions: Sequence[str]) -> str:
    """AgentGym's client's first observation: the text and the admissible commands."""
    return f"{observation}\nAVAILABLE ACTIONS: {','.join(actions)}"


class AlfWorldEnv(LocalEnvironment):
    """One ALFWorld game at a time. `data_dir` defaults to `$ALFWORLD_DATA`."""

    spec = SPEC
    blocking = True

    def __init__(
        self, data_dir: str | os.PathLike[str] | None = None, max_steps: int = MAX_GAME_STEPS
    ) -> None:
        super().__init__()
        self.data_dir = require(data_dir)
        self.max_steps = max_steps
        self._game: TextWorldBatch | None = None

    @staticmethod
    def preflight() -> None:
        """Fail at once, naming what is missing, before any worker starts."""
        require()

    def reset_sync(self, task_id: int) -> Observation:
        path = game_file(self.data_dir, task_id)
        if not path.is_file():
            raise EnvError(
                f"ALFWorld game {task_id} is not in {self.data_dir}: {path} does not exist "
                "(run alfworld-download into $ALFWORLD_DATA)"
            )
        self.close_sync()
        self._game = open_game(path, self.max_steps)
        texts, infos = self._game.reset()
        observation = first_observation(texts[0])
        actions = list(infos["admissible_commands"][0])
        task_type = "/".join(str(infos["extra.gamefile"][0]).split("/")[-3:-1])
        return Observation(
            with_actions(observation, actions),
            {"observation": observation, "available_actions": actions, "task_type": task_type},
        )

    def step_sync(self, action: str) -> StepResult:
        if self._game is None:
            raise EnvironmentNotReset("ALFWorld: call reset(task_id) before step()")
        texts, _, dones, infos = self._game.step([action])
        actions = list(infos.get("admissible_commands", [[]])[0])
        return StepResult(
            step_observation(texts[0]),
            float(infos["won"][0]),
            bool(dones[0]),
            {"available_actions": actions},
        )

    def close_sync(self) -> None:
        if self._game is not None:
            game, self._game = self._game, None
            game.close()
