"""The Echo game: repeat the words shown. Its spec bundles prompt, parser, oracle and reward."""

from __future__ import annotations

from agenttrain.envs import (
    EnvironmentNotReset,
    EnvSpec,
    LocalEnvironment,
    Message,
    Observation,
    StepResult,
    WireProtocol,
)
from agenttrain_echo.actions import parse_action
from agenttrain_echo.oracle import ORACLE, TASK_MARKER

VOCABULARY = ("apple", "river", "stone", "cloud", "maple", "tiger", "lemon", "ocean")
START = (
    Message("user", "Repeat the words you are shown, in order, and nothing else."),
    Message("assistant", "OK."),
)

SPEC = EnvSpec(
    name="echo",
    display_name="Echo",
    description="Single turn: repeat the words shown (a plug-in example).",
    conversation_start=START,
    agentgym_conversation_start=START,
    default_max_turns=1,
    action_format="raw",
    protocol=WireProtocol(root_text="This is environment Echo."),
    split_loader=lambda: {"train": range(0, 800), "val": range(800, 900), "test": range(900, 1000)},
    num_tasks=1000,
    requirements="pure Python (plug-in)",
    parse_action=parse_action,
    oracle=ORACLE,
)


def task_words(task_id: int, words: int) -> list[str]:
    """The `words` words of task `task_id`: a pure function of both."""
    return [VOCABULARY[(task_id * 7 + 3 * i) % len(VOCABULARY)] for i in range(words)]


class EchoEnv(LocalEnvironment):
    """Reward 1 when the reply repeats the words exactly (case aside), else 0."""

    spec = SPEC

    def __init__(self, words: int = 1) -> None:
        super().__init__()
        if words < 1:
            raise ValueError(f"echo: words must be at least 1, got {words}")
        self.words = words
        self._expected: list[str] | None = None

    def reset_sync(self, task_id: int) -> Observation:
        self._expected = task_words(task_id, self.words)
        text = f"{TASK_MARKER} {' '.join(self._expected)}"
        return Observation(text, {"task_id": task_id, "words": self.words})

    def step_sync(self, action: str) -> StepResult:
        if self._expected is None:
            raise EnvironmentNotReset("echo: call reset(task_id) before step()")
        correct = action.lower().split() == self._expected
        return StepResult("Correct." if correct else "Wrong.", 1.0 if correct else 0.0, True)
