"""Largest Number: a single-turn task with a verifiable answer, for quick RL runs and tests.

"Which number is the largest: 41, 7, 93? Reply with the number only." Reward 1 when the first
integer of the reply is the largest, else 0. The embedded SmolLM2-135M gets about 20% right
from the start (it often answers "The largest is 57."), so GRPO has a signal from step one;
a few steps visibly raise it. Tasks are a pure function of the task id.
"""

from __future__ import annotations

import random
import re

from agenttrain.envs.base import (
    EnvironmentNotReset,
    EnvSpec,
    LocalEnvironment,
    Message,
    Observation,
    StepResult,
    WireProtocol,
)
from agenttrain.envs.largest.oracle import ORACLE

FIRST_INTEGER = re.compile(r"-?\d+")
SPLITS = {"train": range(0, 1000), "val": range(1000, 1100), "test": range(1100, 1300)}


def numbers(task_id: int) -> list[int]:
    """The 2-4 distinct numbers (1-99) of task `task_id`."""
    rng = random.Random(f"largest/{task_id}")  # str seeds hash with SHA-512: stable everywhere
    return rng.sample(range(1, 100), 2 + task_id % 3)


def question(task_id: int) -> str:
    listed = ", ".join(map(str, numbers(task_id)))
    return f"Which number is the largest: {listed}? Reply with the number only."


def describe(observation: str) -> dict[str, object]:
    return {"count": len(re.findall(r"\d+", observation.split(":", 1)[-1]))}


START = (
    Message(
        "user",
        "You will be asked which number in a short list is the largest. "
        "Reply with that number only.",
    ),
    Message("assistant", "OK."),
)

SPEC = EnvSpec(
    name="largest",
    display_name="Largest Number",
    description="Single turn: name the largest number in a short list (a quick RL smoke test).",
    conversation_start=START,
    agentgym_conversation_start=START,
    default_max_turns=1,
    action_format="raw",
    protocol=WireProtocol(root_text="This is environment LargestNumber."),
    split_loader=lambda: SPLITS,
    num_tasks=1300,
    requirements="pure Python",
    breakdown_key="count",
    describe=describe,
    oracle=ORACLE,
)


class LargestEnv(LocalEnvironment):
    spec = SPEC

    def __init__(self) -> None:
        super().__init__()
        self._answer: int | None = None

    def reset_sync(self, task_id: int) -> Observation:
        self._answer = max(numbers(task_id))
        return Observation(question(task_id), {"task_id": task_id, **describe(question(task_id))})

    def step_sync(self, action: str) -> StepResult:
        if self._answer is None:
            raise EnvironmentNotReset("largest: call reset(task_id) before step()")
        found = FIRST_INTEGER.search(action)
        correct = found is not None and int(found.group()) == self._answer
        observation = "Correct." if correct else f"Wrong: the largest is {self._answer}."
        return StepResult(observation, 1.0 if correct else 0.0, True)
