"""The contract every environment keeps, in-process or behind an HTTP server.

Everything above `envs/` (rollout, eval, training) talks to an `Environment` and never
knows whether the episode runs in this process or on an AgentGym-compatible server.
The methods are async because many episodes are in flight at once; an in-process
environment whose steps are cheap simply never awaits anything.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal, Protocol, runtime_checkable

from agenttrain.envs.actions import ActionParser, Oracle, after_last_action

Role = Literal["system", "user", "assistant"]


@dataclass(frozen=True)
class Message:
    """One chat message of a conversation start (instructions, acknowledgement)."""

    role: Role
    content: str

    def to_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True)
class Observation:
    """What the agent sees after `reset`: the text, plus environment-specific details."""

    text: str
    info: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StepResult:
    """The outcome of one action. `reward` is the step's reward as the environment defines it."""

    observation: str
    reward: float
    done: bool
    info: Mapping[str, Any] = field(default_factory=dict)


class EnvError(Exception):
    """Base class of errors raised by environments and their clients."""


class EnvironmentNotReset(EnvError):
    """`step` was called before `reset`."""


class UnknownSplit(KeyError):
    """A split name the environment does not publish. A KeyError for callers that catch one,
    printed as its message (KeyError's own str() would wrap it in quotes)."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class WireProtocol:
    """How AgentGym serves one environment over HTTP (reference: agentgym.md sections 0-1).

    AgentGym has two id dialects and a different task field per environment; clients must
    speak each exactly to drive unmodified AgentGym servers.
    """

    root_text: str
    """Body of `GET /` (a JSON string), used to check a server's identity."""
    id_field: Literal["id", "env_idx"] = "id"
    task_field: str = "data_idx"
    """Field of `POST /reset` that selects the task."""
    task_required: bool = False
    """AgentGym's `/reset` refuses a body without `task_field` (422); False: it defaults to 0."""
    float_rewards: bool = False
    """Rewards go out as JSON floats (1.0, 0.0), as AgentGym's SQLGym and SearchQA send them;
    False: integral values as ints (AgentGym's TextCraft sends 0/1)."""
    create_body: Mapping[str, Any] | None = None
    """JSON body AgentGym's client sends to `/create` (None: no body)."""
    create_task_field: str | None = None
    """Field of the `/create` body that preloads a task (SearchQA sends `{"id": task}`)."""
    create_returns_observation: bool = False
    """TextCraft's `/create` already resets to task `id` and returns its observation."""
    reset_extra: Mapping[str, Any] = field(default_factory=dict)
    """Constant extra fields of `/reset` (ALFWorld's `world_type`)."""
    reset_returns: Literal["object", "pair", "text"] = "object"
    """`object`: {"observation": ...}; `pair`: [observation, null]; `text`: a bare string."""
    step_observation_field: str = "observation"
    has_close: bool = True
    """False: the server has no `/close` (sessions live on), so the client reuses a finished
    session for the next episode by `/reset` instead of creating another."""
    max_sessions: int | None = None
    """Sessions a server creates before `/create` hands out ids it already gave (SQLGym 8,
    WebShop 8,000); the client keeps at most this many live per server."""
    max_requests_in_flight: int | None = None
    """Requests the client sends one server at once; None: no limit. For servers whose
    handlers run one at a time (ALFWorld), so waiting happens before a request's timeout starts."""
    first_observation: Literal["observation", "task_and_observation", "with_actions"] = (
        "observation"
    )
    """How AgentGym's client forms the first observation from the reset answer."""
    reset_fields: tuple[str, ...] = ("id", "observation", "done", "reward")
    """Fields of an `object` reset answer, in order. `id`, `observation`, `reward`, `done` and
    `deleted` (always false) are the session's; any other is read from the reset's
    `Observation.info` (BabyAI: `score`)."""
    step_info_fields: tuple[str, ...] = ()
    """Entries of `StepResult.info` the step answer carries beside observation, reward and
    done (BabyAI: `score`)."""
    step_info: tuple[str, ...] = ()
    """Entries of `StepResult.info` an `env_idx` server's step answer carries in its `info`
    object (SQLGym: `ground_truth`, the gold SQL); `info` is null when there are none."""
    observation_fields: tuple[str, ...] = ()
    """Empty: `GET /observation` answers the text; else an object of these session fields,
    named as in `reset_fields` (BabyAI answers observation, reward, score, done, deleted)."""
    finished_error: str | None = None
    """AgentGym's answer to a step after the episode ended, `{id}` standing for the session id
    (BabyAI: "The task with environment {id} has finished."); None: such steps are played."""
    queries: tuple[str, ...] = ()
    """Extra `GET /<name>?id=` routes answered by the environment's `query(name)` (SciWorld:
    `action_hint`, `goals`, `task_description`); refused like a step once the episode ended."""


@dataclass(frozen=True)
class EnvSpec:
    """Class-level metadata of an environment: what it is, how to talk to it, which tasks,
    how its actions are read from a reply, and its oracle."""

    name: str
    display_name: str
    description: str
    conversation_start: tuple[Message, ...]
    """The instructions and acknowledgement that open every episode (AgentGym's, bugs fixed)."""
    agentgym_conversation_start: tuple[Message, ...]
    """AgentGym's text verbatim, for reproducing published numbers exactly."""
    default_max_turns: int
    action_format: str
    protocol: WireProtocol
    split_loader: Callable[[], Mapping[str, Sequence[int]]]
    num_tasks: int | None = None
    requirements: str = ""
    """What it takes to run the environment in-process (shown by `agenttrain envs`)."""
    success_reward: float = 1.0
    """An episode that ends done with at least this reward is a success."""
    episode_reward: Literal["last", "sum"] = "last"
    """How step rewards make the episode's reward when the rollout config does not say:
    the last step's (AgentGym's convention; TextCraft) or their sum (environments whose step
    reward is a score change, e.g. SciWorld, or whose AgentGym client reports a running
    score: BabyAI)."""
    breakdown_key: str | None = None
    """A key of the reset info to break evaluation results down by (TextCraft: depth)."""
    task_stratum: Callable[[int], str] | None = None
    """A task's difficulty class, known without playing it (TextCraft: its crafting depth).
    Frontier sampling pools the success of tasks of one class, so a task never played yet
    starts from its class's rate instead of the run's."""
    describe: Callable[[str], Mapping[str, Any]] | None = None
    """Task details read from a first observation (works for remote servers, whose reset
    answers carry only the text)."""
    task_key: str | None = None
    """The entry of `describe`'s details that identifies a task on any server (TextCraft:
    "goal"). Set it when servers number tasks differently: the client then maps task ids."""
    parse_action: ActionParser = after_last_action
    """How a ReAct reply becomes this environment's action (its AgentGym client's rule)."""
    oracle: Oracle | None = None
    """The expert that solves its tasks, if it has one (demonstrations, `--model oracle`)."""
    progress: Callable[[int, Sequence[str]], float] | None = None
    """How far an unsolved episode of a task got, from 0 to 1, given the actions it sent
    (TextCraft: the share of the goal's intermediate items crafted). Training adds
    `reward.progress_weight` times it to a failed episode's score; evaluation never does."""
    refused: Callable[[str], bool] | None = None
    """Whether an observation says the environment refused the action and changed nothing
    (TextCraft: "Could not find enough items to craft ..."). Training's
    `reward.loop_penalty` counts actions sent again unchanged after such a refusal."""
    refusal_kind: Callable[[str], str | None] | None = None
    """What kind of refusal an observation is, in a few words, or None when it is not one
    (TextCraft: "made-up recipe", "missing ingredients"). `agenttrain compare` files each
    failed episode under its first refusal's kind (without it: "refused action")."""
    recoveries: Callable[[int, Sequence[str]], tuple[int, int]] | None = None
    """Given a task and the actions sent: (refusals for something lacking that were followed
    by another action, those whose next action went after what was lacking). TextCraft: a
    craft refused for missing ingredients, then a `get` or craft of an item on the way to
    them. Training's `reward.recovery_penalty` charges the refusals not recovered."""
    states: Callable[[int, Sequence[str]], list[str]] | None = None
    """Given a task and the actions sent: the state before each action and after the last
    (one more text than actions; TextCraft: the inventory). GiGPO with
    `algorithm.gigpo.anchor=state` groups turns by it where observations do not show the
    state ("Got 1 stick" follows many inventories)."""
    action_verbs: tuple[str, ...] = ()
    """The words its actions start with (TextCraft: get, craft, inventory). Training logs
    each one's count per episode (`rollout/actions/<verb>`), so a policy that stops using
    one (e.g. never crafts, to dodge a penalty for refused crafts) shows in the curves."""
    action_fields: tuple[str, ...] = ()
    """The fields of its JSON action (econ: work, consumption). `agenttrain compare` shows
    the distributions of these only, not of stray keys in malformed replies."""

    @cached_property
    def _splits(self) -> Mapping[str, tuple[int, ...]]:
        return {name: tuple(ids) for name, ids in self.split_loader().items()}

    def splits(self) -> Mapping[str, tuple[int, ...]]:
        """Named task-id splits (e.g. train/val/test); empty when none is published."""
        return self._splits

    def split(self, name: str) -> tuple[int, ...]:
        splits = self.splits()
        if name not in splits:
            allowed = ", ".join(splits) or "none (pass task ids explicitly)"
            raise UnknownSplit(f"{self.name} has no split {name!r}; splits: {allowed}")
        return splits[name]


@runtime_checkable
class Environment(Protocol):
    """One episode at a time: `reset` to a task, `step` with actions, `close` when done."""

    spec: EnvSpec

    async def reset(self, task_id: int) -> Observation: ...

    async def step(self, action: str) -> StepResult: ...

    async def close(self) -> None: ...


class LocalEnvironment:
    """Base for in-process environments written as plain synchronous code.

    Subclasses implement `reset_sync`/`step_sync`. Cheap environments run inline on the
    event loop; those that block (a JVM call, a simulator) set `blocking = True` and run in
    a worker thread, serialised per instance.
    """

    spec: EnvSpec
    blocking: bool = False

    def __init__(self) -> None:
        self._lock: asyncio.Lock | None = None

    def reset_sync(self, task_id: int) -> Observation:
        raise NotImplementedError

    def step_sync(self, action: str) -> StepResult:
        raise NotImplementedError

    def close_sync(self) -> None:
        """Release resources; the default has none."""

    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        if not self.blocking:
            return fn(*args)
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            return await asyncio.to_thread(fn, *args)

    async def reset(self, task_id: int) -> Observation:
        return await self._call(self.reset_sync, task_id)

    async def step(self, action: str) -> StepResult:
        return await self._call(self.step_sync, action)

    async def close(self) -> None:
        await self._call(self.close_sync)


def describe_failure(failure: BaseException) -> str:
    """How an environment failure is reported: `timeout`, or the error's type and message."""
    kind = "timeout" if isinstance(failure, asyncio.TimeoutError) else type(failure).__name__
    return f"{kind}: {failure}" if str(failure) else kind
