"""Finished episodes into experiences: by rules (default, no model needed) or by an LLM
behind an OpenAI-compatible API (`openai:<model>`).

Rules: a success yields "what worked" (its action sequence, keyed by the goal); a failure
with refused actions yields "what to avoid" (those actions and what the environment said).
A failure without refusals says nothing specific, so it yields nothing.
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any, Protocol

from agenttrain.memory.experience import (
    TRAIN_SPLIT,
    EpisodeRecord,
    Experience,
    Step,
    without_experience,
)
from agenttrain.policy.base import ChatMessage, SamplingParams
from agenttrain.rollout.trajectory import Trajectory

log = logging.getLogger(__name__)
REFUSAL = re.compile(
    r"^\s*(could not|invalid|nothing happens|you can't|can't|cannot|unknown|error)", re.I
)
"""How environments of the AgentGym family word a refused action (TextCraft: "Could not
find ...", ALFWorld: "Nothing happens.", AgentEvolver's port: "Invalid action.")."""
MAX_SHOWN_STEPS = 20


class Summarizer(Protocol):
    name: str

    async def summarize(self, record: EpisodeRecord) -> list[Experience]: ...


class RuleSummarizer:
    name = "rules"

    async def summarize(self, record: EpisodeRecord) -> list[Experience]:
        if record.success:
            return [self._what_worked(record)]
        avoid = self._what_to_avoid(record)
        return [avoid] if avoid is not None else []

    @staticmethod
    def _what_worked(record: EpisodeRecord) -> Experience:
        actions = [step.action for step in record.steps if not step.invalid]
        shown = "; ".join(actions[:MAX_SHOWN_STEPS])
        hidden = len(actions) - MAX_SHOWN_STEPS
        more = f" (and {hidden} more)" if hidden > 0 else ""
        return Experience(
            when_to_use=f"Task: {record.goal}",
            content=f"These actions completed this task in {len(actions)} steps: {shown}{more}",
            score=record.score,
            task_id=record.task_id,
            split=record.split,
            metadata={"kind": "success"},
        )

    @staticmethod
    def _what_to_avoid(record: EpisodeRecord) -> Experience | None:
        refused = [step for step in record.steps if step.invalid]
        if not refused:
            return None
        counts = Counter(step.action for step in refused)
        answers = {step.action: step.observation.strip().splitlines()[0][:120] for step in refused}
        items = [
            f"`{action}` ({count}x: {answers[action]})" for action, count in counts.most_common(5)
        ]
        return Experience(
            when_to_use=f"Task: {record.goal}",
            content="Avoid these actions, which were refused in a failed attempt: "
            + "; ".join(items),
            score=record.score,
            task_id=record.task_id,
            split=record.split,
            metadata={"kind": "failure"},
        )


LLM_PROMPT = """You extract reusable experience from an agent's attempt at a task.
Task: {goal}
Outcome: {outcome} (score {score})
Steps (action -> observation):
{steps}

Reply with only a JSON list of 1 to 3 objects {{"when_to_use": ..., "experience": ...}}:
when_to_use names the kind of task it helps with; experience says what to do or avoid."""


class LLMSummarizer:
    """One chat call per episode; a reply that is not the asked JSON is logged and skipped
    (counted in `failures`), never turned into an experience."""

    def __init__(self, backend: Any, model_name: str) -> None:
        self.backend = backend
        self.name = model_name
        self.failures = 0

    async def summarize(self, record: EpisodeRecord) -> list[Experience]:
        steps = "\n".join(
            f"{step.action} -> {step.observation.strip()[:200]}"
            for step in record.steps[:MAX_SHOWN_STEPS]
        )
        prompt = LLM_PROMPT.format(
            goal=record.goal,
            outcome="success" if record.success else "failure",
            score=record.score,
            steps=steps,
        )
        sampling = SamplingParams(temperature=0.0, max_new_tokens=512)
        [reply] = await self.backend.chat([[ChatMessage("user", prompt)]], sampling)
        try:
            items = _json_list(reply.text)
        except ValueError as problem:
            self.failures += 1
            log.warning(
                "summarizer %s: unusable reply for task %s: %s", self.name, record.task_id, problem
            )
            return []
        return [
            Experience(
                when_to_use=str(item["when_to_use"]),
                content=str(item["experience"]),
                score=record.score,
                task_id=record.task_id,
                split=record.split,
                author=self.name,
                metadata={"kind": "success" if record.success else "failure"},
            )
            for item in items
        ]


def _json_list(text: str) -> list[dict[str, Any]]:
    start, end = text.find("["), text.rfind("]")
    if start < 0 or end < start:
        raise ValueError(f"no JSON list in {text[:200]!r}")
    items = json.loads(text[start : end + 1])
    if not isinstance(items, list) or not all(
        isinstance(i, dict) and "when_to_use" in i and "experience" in i for i in items
    ):
        raise ValueError(f"expected objects with when_to_use and experience: {text[:200]!r}")
    return items


def build_summarizer(spec: str, base_url: str | None = None) -> Summarizer:
    """`rules`, or `openai:<model>` (an OpenAI-compatible endpoint; key from $OPENAI_API_KEY)."""
    if spec == "rules":
        return RuleSummarizer()
    if spec.startswith("openai:") and spec != "openai:":
        from agenttrain.policy.openai import OpenAIChatPolicy

        model = spec.removeprefix("openai:")
        return LLMSummarizer(OpenAIChatPolicy(model, base_url=base_url), spec)
    raise ValueError(f"memory summarizer {spec!r}: use 'rules' or 'openai:<model>'")


def record_of(trajectory: Trajectory, split: str, first_user: int) -> EpisodeRecord:
    """An episode of our rollout engine; the goal is what the environment described at reset
    (TextCraft: the item to craft), else the first observation. `first_user`: the index of
    the first user message."""
    goal = str(trajectory.task_info.get("goal") or trajectory.messages[first_user]["content"])
    steps = tuple(
        Step(
            turn.action if turn.action is not None else turn.reply.strip()[:200],
            turn.observation,
            turn.action is None or bool(REFUSAL.match(turn.observation)),
        )
        for turn in trajectory.turns
    )
    return EpisodeRecord(
        task_id=str(trajectory.task_id),
        split=split,
        goal=goal,
        steps=steps,
        score=float(trajectory.reward or 0.0),
        success=trajectory.success,
    )


def record_from_messages(
    messages: Sequence[dict[str, Any]],
    score: float,
    task_id: str,
    split: str = TRAIN_SPLIT,
    success_threshold: float = 1.0,
    *,
    first_user: int | None = None,
    goal: str | None = None,
) -> EpisodeRecord:
    """A ReMe trajectory (`{messages, score}`, as AgentEvolver sends it): each assistant
    message after the task is an action (the text after its last `Action:`), the next user or
    tool message its observation. The goal is `goal`, else the task's message: the one at
    `first_user` (our client sends it: what precedes it is the environment's fixed
    conversation start, instructions and acknowledgement), else the first user message; any
    experience block removed."""
    start = first_user if first_user is not None else 0
    users = [m for m in messages[start:] if m.get("role") == "user"]
    if goal is None:
        goal = without_experience(str(users[0].get("content", ""))).strip() if users else ""
        goal = re.sub(r"<EXP>.*?</EXP>", "", goal, flags=re.S).strip()
    steps: list[Step] = []
    for index, message in enumerate(messages):
        if index < start or message.get("role") != "assistant":
            continue
        content = str(message.get("content") or "")
        action = content.rsplit("Action:", 1)[-1].strip()
        following = messages[index + 1] if index + 1 < len(messages) else {}
        answered = following.get("role") in ("user", "tool")
        observation = str(following.get("content") or "") if answered else ""
        steps.append(Step(action, observation, bool(REFUSAL.match(observation))))
    return EpisodeRecord(task_id, split, goal, tuple(steps), score, score >= success_threshold)
