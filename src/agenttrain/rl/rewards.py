"""Custom reward functions with verl's signature, so a verl reward file works unchanged.

    def compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs) -> float | dict

`solution_str` is the episode's whole response (every turn, environment answers included),
as verl decodes it; `ground_truth` is the task's details (TextCraft: its goal); `extra_info`
carries the environment's reward, the per-turn rewards, the turn count and the task. A dict
result must hold "score"; its other keys are logged. `async def` functions work too.

The score replaces the episode's reward: for a one-turn task it is the reward of the one
decision; for a multi-turn task it overrides the environment's final score (the environment's
own stays in `extra_info["env_reward"]`). A file that cannot be imported, a function that
raises, or a result that is not a finite number (None, a string, NaN) stops the run with an
error naming the file and the function, never a silent 0.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from agenttrain.envs.base import EnvSpec
from agenttrain.rollout.trajectory import Trajectory


class RewardFunctionError(ValueError):
    pass


@dataclass(frozen=True)
class RewardFunction:
    """A user's reward function and where it came from (for error messages)."""

    function: Callable[..., Any]
    path: Path
    name: str

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)

    def __str__(self) -> str:
        return f"{self.name} in {self.path}"


def load_reward_function(path: Path, name: str) -> RewardFunction:
    if not path.exists():
        raise RewardFunctionError(f"reward.custom_function.path: no such file: {path}")
    spec = importlib.util.spec_from_file_location(f"agenttrain_reward_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise RewardFunctionError(f"reward.custom_function.path: cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as failure:  # the user's module: any error, reported with its file
        raise RewardFunctionError(
            f"reward.custom_function.path: importing {path} failed: "
            f"{type(failure).__name__}: {failure}"
        ) from failure
    function = getattr(module, name, None)
    if not callable(function):
        found = [n for n, v in vars(module).items() if callable(v) and not n.startswith("_")]
        defined = ", ".join(found) or "nothing callable"
        raise RewardFunctionError(
            f"reward.custom_function.name: {path} has no function {name!r}; it defines: {defined}"
        )
    return RewardFunction(function, path, name)


def solution_text(trajectory: Trajectory, tokenizer: Any = None) -> str:
    """The whole response after the first observation, as verl's `solution_str`."""
    if tokenizer is not None and trajectory.response_ids:
        return tokenizer.decode(trajectory.response_ids, skip_special_tokens=True)
    first = next(
        (i for i, m in enumerate(trajectory.messages) if m["role"] == "assistant" and i >= 2), None
    )
    if first is None:
        return ""
    return "\n".join(m["content"] for m in trajectory.messages[first:])


@dataclass
class Scored:
    score: float
    extra: dict[str, float]


def score_episode(
    function: Callable[..., Any], trajectory: Trajectory, tokenizer: Any, kwargs: dict[str, Any]
) -> Scored:
    info = dict(trajectory.task_info)
    try:
        result = function(
            data_source=trajectory.env,
            solution_str=solution_text(trajectory, tokenizer),
            ground_truth=info.get("ground_truth", info.get("goal", info)),
            extra_info={
                **info,
                "task_id": trajectory.task_id,
                "env_reward": trajectory.reward,
                "turn_scores": trajectory.turn_rewards,
                "num_turns": trajectory.num_turns,
                "success": trajectory.success,
                "finish_reason": trajectory.finish_reason,
            },
            **kwargs,
        )
        if inspect.isawaitable(result):
            result = asyncio.run(result)
    except Exception as failure:  # the user's code: any error, reported with its origin
        raise RewardFunctionError(
            f"the reward function {function} raised {type(failure).__name__}: {failure} "
            f"(task {trajectory.task_id})"
        ) from failure
    if isinstance(result, dict):
        if "score" not in result:
            raise RewardFunctionError(
                f"the reward function {function} returned a dict without 'score': {result}"
            )
        extra = {
            k: float(v) for k, v in result.items() if k != "score" and isinstance(v, (int, float))
        }
        return Scored(_finite(result["score"], function, trajectory), extra)
    return Scored(_finite(result, function, trajectory), {})


def _finite(value: Any, function: Callable[..., Any], trajectory: Trajectory) -> float:
    """`value` as a float, or the error a non-number (None, a string, NaN, inf) deserves."""
    if isinstance(value, numbers.Real) and math.isfinite(value):
        return float(value)
    raise RewardFunctionError(
        f"the reward function {function} returned {value!r} for task {trajectory.task_id}; "
        "it must return a finite number or a dict with a numeric 'score'"
    )


Progress = Callable[[int, Sequence[str]], float]
"""An environment's progress of an episode: (task id, actions sent) -> 0..1 (`EnvSpec.progress`)."""
Refusal = Callable[[str], bool]
"""Whether an observation is the environment refusing an action (`EnvSpec.refused`)."""
Recoveries = Callable[[int, Sequence[str]], tuple[int, int]]
"""(refusals followed by an action, of those recovered) of an episode (`EnvSpec.recoveries`)."""


def progress_functions(specs: Sequence[EnvSpec], weight: float) -> dict[str, Progress]:
    """Each environment's progress function, when `reward.progress_weight` asks for them; an
    environment without one is a configuration error, not a silent success-only reward."""
    return _required(specs, "progress", "reward.progress_weight", weight, "reports no progress")


def _required(
    specs: Sequence[EnvSpec], attribute: str, setting: str, value: float, lacks: str
) -> dict[str, Any]:
    """{env name: spec.<attribute>} when `setting` (= `value`) is on; an environment whose
    spec lacks it is a RewardFunctionError naming it and the way out."""
    if value == 0:
        return {}
    missing = [spec.name for spec in specs if getattr(spec, attribute) is None]
    if missing:
        raise RewardFunctionError(
            f"{setting} is {value} but {', '.join(missing)} {lacks} "
            f"(environments that do: textcraft); set {setting}=0"
        )
    return {spec.name: getattr(spec, attribute) for spec in specs}


def progress_weight_at(step: int, weight: float, fade_steps: int) -> float:
    """The partial-credit weight of training step `step` (from 1): constant without a fade,
    else falling linearly from `weight` at step 1 to 0 at step `fade_steps` + 1."""
    if not fade_steps:
        return weight
    return weight * max(0.0, 1.0 - (step - 1) / fade_steps)


def add_progress(
    trajectories: Sequence[Trajectory],
    scores: Sequence[float],
    progress: dict[str, Progress],
    weight: float,
) -> tuple[list[float], dict[str, list[float]]]:
    """Scores with `weight` × progress added to every unsolved, unerrored episode's, and the
    progress of each of those episodes (logged as their mean, `reward/progress`). Solved
    episodes keep their score, so a failure always scores below a success when `weight` < 1."""
    shaped = list(scores)
    if not progress:
        return shaped, {}
    credits = []
    for index, trajectory in enumerate(trajectories):
        if trajectory.errored or trajectory.success:
            continue
        actions = [turn.action for turn in trajectory.turns if turn.action is not None]
        credit = progress[trajectory.env](trajectory.task_id, actions)
        shaped[index] += weight * credit
        credits.append(credit)
    return shaped, {"reward/progress": credits} if credits else {}


def subtract_format_penalty(
    trajectories: Sequence[Trajectory], scores: Sequence[float], penalty: float
) -> tuple[list[float], dict[str, list[float]]]:
    """Scores with `penalty` taken from every unerrored episode that holds a reply the action
    format refused, and which episodes were penalised (logged as their share,
    `reward/format_penalised`). Errored episodes are left alone: they are not trained on."""
    return _subtract(trajectories, scores, penalty, _broke_format, "reward/format_penalised")


def subtract_loop_penalty(
    trajectories: Sequence[Trajectory],
    scores: Sequence[float],
    penalty: float,
    refusals: dict[str, Refusal],
    charged: Sequence[bool] | None = None,
) -> tuple[list[float], dict[str, list[float]]]:
    """Scores with `penalty` × the episode's share of looping turns (`looping_turns`) taken
    from every unerrored episode (only those `charged` marks, when given), and those shares
    (logged as their mean, `reward/looping`)."""

    def share(trajectory: Trajectory) -> float:
        loops = looping_turns(trajectory, refusals[trajectory.env])
        return loops / max(1, trajectory.num_turns)

    return _subtract(trajectories, scores, penalty, share, "reward/looping", charged)


def looping_turns(trajectory: Trajectory, refused: Refusal) -> int:
    """Turns that send again, word for word, an action the environment just refused: a loop
    that changes nothing (TextCraft: a craft tried again without fetching what it lacked). A
    repeat of an accepted action (crafting planks twice) is not one."""
    return sum(
        turn.action is not None and turn.action == before.action and refused(before.observation)
        for before, turn in pairwise(trajectory.turns)
    )


def refusal_functions(specs: Sequence[EnvSpec], penalty: float) -> dict[str, Refusal]:
    """Each environment's refusal test, when `reward.loop_penalty` asks for them; one without
    it is a configuration error, not a penalty that never applies."""
    lacks = "does not say which observations refuse an action"
    return _required(specs, "refused", "reward.loop_penalty", penalty, lacks)


def subtract_recovery_penalty(
    trajectories: Sequence[Trajectory],
    scores: Sequence[float],
    penalty: float,
    recoveries: dict[str, Recoveries],
    charged: Sequence[bool] | None = None,
) -> tuple[list[float], dict[str, list[float]]]:
    """Scores with `penalty` × the episode's share of unrecovered refusals
    (`unrecovered_share`) taken from every unerrored episode (only those `charged` marks,
    when given), and those shares (logged as their mean, `reward/unrecovered`)."""

    def share(trajectory: Trajectory) -> float:
        return unrecovered_share(trajectory, recoveries[trajectory.env])

    return _subtract(trajectories, scores, penalty, share, "reward/unrecovered", charged)


def unrecovered_share(trajectory: Trajectory, recoveries: Recoveries) -> float:
    """The share of the episode's refusals (for something lacking, followed by an action)
    whose next action did not go after what was lacking; 0 without such a refusal, so a
    policy gains nothing by provoking refusals it then answers well."""
    actions = [turn.action for turn in trajectory.turns if turn.action is not None]
    refusals, recovered = recoveries(trajectory.task_id, actions)
    return (refusals - recovered) / refusals if refusals else 0.0


def recovery_functions(specs: Sequence[EnvSpec], penalty: float) -> dict[str, Recoveries]:
    """Each environment's recovery count, when `reward.recovery_penalty` asks for them; one
    without it is a configuration error, not a penalty that never applies."""
    lacks = "does not report whether a refusal was recovered from"
    return _required(specs, "recoveries", "reward.recovery_penalty", penalty, lacks)


def cap_at_credit(
    trajectories: Sequence[Trajectory],
    before: Sequence[float],
    after: Sequence[float],
    credit: Sequence[float],
) -> list[float]:
    """Scores `after` the refusal penalties, with what they took from each failed episode
    capped at the partial `credit` it earned (`reward.refusal_penalty_cap=progress`), so
    trying and being refused never scores below doing nothing. Successes keep `after`."""
    return [
        penalised if trajectory.success else max(penalised, unpenalised - earned)
        for trajectory, unpenalised, penalised, earned in zip(
            trajectories, before, after, credit, strict=True
        )
    ]


def _broke_format(trajectory: Trajectory) -> float:
    return float(trajectory.format_errors > 0)


def _subtract(
    trajectories: Sequence[Trajectory],
    scores: Sequence[float],
    penalty: float,
    amount: Callable[[Trajectory], float],
    metric: str,
    charged: Sequence[bool] | None = None,
) -> tuple[list[float], dict[str, list[float]]]:
    """`penalty` × `amount(episode)` taken from each unerrored episode's score (only those
    `charged` marks, when given), and the amounts under `metric` (every episode's, charged
    or not, so the behaviour stays visible). 0: the scores unchanged and nothing logged."""
    if not penalty:
        return list(scores), {}
    marks = [True] * len(scores) if charged is None else charged
    shaped, amounts = [], []
    for trajectory, score, charge in zip(trajectories, scores, marks, strict=True):
        share = 0.0 if trajectory.errored else amount(trajectory)
        shaped.append(score - penalty * share if charge else score)
        amounts.append(share)
    return shaped, {metric: amounts}


def in_solved_groups(trajectories: Sequence[Trajectory]) -> list[bool]:
    """For each episode, whether some unerrored episode of its group succeeded: where
    `reward.loop_penalty_groups=solved` (and `recovery_penalty_groups`) charge a penalty. In a
    group nobody solved they would favour the episode that never tried (no craft, no
    refusal), which a policy learns to copy."""
    solved = {t.group_id for t in trajectories if t.success and not t.errored}
    return [t.group_id in solved for t in trajectories]
