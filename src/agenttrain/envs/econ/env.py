"""`econ` and `econ_year`: a household's monthly decisions, answered as strict JSON.

`econ` is one decision (one month, as the seed workflow trains); `econ_year` plays twelve
months, each month's state following from the decisions before. The action is exactly one JSON
object `{"work": w, "consumption": c}` with both fields in [0, 1] (`envs.json_action`, strict:
no text around it, no fence). A month's reward is the decision's score in (0, 1]
(`model.score`: 1 for the best decision, 1/2 for one losing δ = 0.1 of utility); a reply
that breaks the format scores the penalty (−1) and, in `econ_year`, the month passes with no
work and no spending. `econ_year` pays each month's reward divided by the number of months,
so both variants' episode rewards are a mean score on the same scale.

With `fewshot_pool=PATH` the k most similar good decisions of training episodes are shown
under the state (`agent.fewshot`; the pool must hold train tasks only).
"""

from __future__ import annotations

from pathlib import Path

from agenttrain.agent.fewshot import (
    Retriever,
    check_split,
    format_examples,
    read_pool,
    state_features,
)
from agenttrain.envs.base import (
    EnvironmentNotReset,
    EnvSpec,
    LocalEnvironment,
    Message,
    Observation,
    StepResult,
    WireProtocol,
)
from agenttrain.envs.econ.model import HOURS, Household, initial_household, next_month, play, score
from agenttrain.envs.econ.oracle import ORACLE, TASK_MARKER
from agenttrain.envs.json_action import FORMAT_PENALTY, JsonField, JsonSchema, compose_reward

SPLITS = {"train": range(0, 1000), "val": range(1000, 1100), "test": range(1100, 1300)}
YEAR = 12
SCHEMA = JsonSchema(
    (
        JsonField("work", "number", 0.0, 1.0),
        JsonField("consumption", "number", 0.0, 1.0),
    )
)
GOOD_DECISION = 0.9
"""A decision (or a year's mean) scoring at least this is a success."""
FEWSHOT_HEADER = "Good decisions of households in similar situations (from training episodes):"

INSTRUCTIONS = (
    "You decide for a household, one month at a time. Each month you see its savings, "
    "hourly wage, last income, the price level, inflation, the interest paid on savings, the "
    "income tax rate and the monthly transfer it receives. You choose two shares in [0, 1]: "
    f"`work`, the share of the month's {HOURS:g} hours worked (income = work x hours x "
    "wage, taxed at the tax rate), and `consumption`, the share of cash on hand spent this "
    "month (cash on hand = savings with interest + income after tax + transfer; the rest is "
    "saved). The household values consumption, with diminishing returns, dislikes work, and "
    "needs its savings for the coming year, when prices will have moved with inflation.\n"
    "Reply with exactly one JSON object and nothing else, for example "
    '{"work": 0.6, "consumption": 0.2}. Anything else scores -1.'
)
START = (Message("user", INSTRUCTIONS), Message("assistant", "OK."))


def describe_state(state: Household, months: int = 1) -> str:
    """The month's observation: the state as `- name: value` lines (what the oracle and the
    few-shot pool read back), recent months, and the question."""
    of = f" (month {state.elapsed + 1} of {months})" if months > 1 else ""
    lines = [
        f"{TASK_MARKER} {state.month}{of}:",
        f"- savings: {state.savings:.2f}",
        f"- hourly wage: {state.wage:.2f}",
        f"- last income: {state.last_income:.2f}",
        f"- price level: {state.price:.4f}",
        f"- inflation (monthly): {state.inflation * 100:.2f}%",
        f"- interest on savings (monthly): {state.interest * 100:.2f}%",
        f"- income tax rate: {state.tax_rate * 100:.1f}%",
        f"- monthly transfer: {state.transfer:.2f}",
        "Recent months (oldest first):",
        *(
            f"  work {m.work:.2f}, consumption {m.consumption:.2f}, income {m.income:.2f}"
            for m in state.history
        ),
    ]
    return "\n".join(lines)


QUESTION = 'Your decision, as one JSON object: {"work": <0 to 1>, "consumption": <0 to 1>}'


def _spec(name: str, months: int) -> EnvSpec:
    single = months == 1
    return EnvSpec(
        name=name,
        display_name="Household economics" + ("" if single else f" ({months} months)"),
        description=(
            "Single decision: a household's work and consumption shares for one month, as JSON."
            if single
            else f"A household's work and consumption shares, month by month for {months} months."
        ),
        conversation_start=START,
        agentgym_conversation_start=START,
        default_max_turns=months,
        action_format="raw",
        protocol=WireProtocol(root_text=f"This is environment {name}."),
        split_loader=lambda: SPLITS,
        num_tasks=1300,
        requirements="pure Python (numpy)",
        success_reward=GOOD_DECISION,
        episode_reward="last" if single else "sum",
        oracle=ORACLE,
        action_fields=tuple(field.name for field in SCHEMA.fields),
    )


SPEC = _spec("econ", 1)
YEAR_SPEC = _spec("econ_year", YEAR)


class EconEnv(LocalEnvironment):
    """One month's decision (`econ`)."""

    spec = SPEC
    months = 1

    def __init__(
        self,
        fewshot_pool: str | None = None,
        fewshot_k: int = 3,
        format_penalty: float = FORMAT_PENALTY,
    ) -> None:
        super().__init__()
        self.format_penalty = format_penalty
        self.retriever = _retriever(fewshot_pool, fewshot_k) if fewshot_pool else None
        self._task: int | None = None
        self._state: Household | None = None

    def reset_sync(self, task_id: int) -> Observation:
        self._task, self._state = task_id, initial_household(task_id)
        # ground_truth as verl's parquet rows carry it: the task id (the state follows from it)
        return Observation(self._prompt(), {"task_id": task_id, "ground_truth": str(task_id)})

    def step_sync(self, action: str) -> StepResult:
        if self._state is None or self._task is None:
            raise EnvironmentNotReset(f"{self.spec.name}: call reset(task_id) before step()")
        state = self._state
        composed = compose_reward(
            action, SCHEMA, lambda d: score(state, d["work"], d["consumption"]), self.format_penalty
        )
        work, consumption = (
            (composed.action["work"], composed.action["consumption"])
            if composed.action
            else (0.0, 0.0)
        )
        self._state = next_month(state, work, consumption, self._task)
        done = self._state.elapsed >= self.months
        report = _report(state, work, consumption, composed.reward, composed.format_error)
        observation = report if done else f"{report}\n\n{self._prompt()}"
        info = {"format_error": composed.format_error, "month_score": composed.reward}
        return StepResult(observation, composed.reward / self.months, done, info)

    def _prompt(self) -> str:
        assert self._state is not None
        text = describe_state(self._state, self.months)
        if self.retriever is not None:
            examples = self.retriever.nearest(state_features(text), exclude_task=self._task)
            text += "\n" + format_examples(examples, FEWSHOT_HEADER)
        return f"{text}\n{QUESTION}"


class EconYearEnv(EconEnv):
    """Twelve months in a row (`econ_year`): each month's state follows from the decisions."""

    spec = YEAR_SPEC
    months = YEAR


def _retriever(path: str, k: int) -> Retriever:
    examples = read_pool(Path(path))
    check_split(examples, (SPEC.name, YEAR_SPEC.name), SPLITS["train"])
    return Retriever(examples, k)


def _report(
    state: Household, work: float, consumption: float, reward: float, error: str | None
) -> str:
    if error is not None:
        return (
            f"Invalid decision ({error}); score {reward:g}. The month passed with no work and no "
            "spending. Reply with exactly one JSON object, e.g. "
            '{"work": 0.6, "consumption": 0.2}.'
        )
    outcome = play(state, work, consumption)
    return (
        f"Month {state.month}: earned {outcome.income:.2f} (tax {outcome.tax:.2f}), spent "
        f"{outcome.spending:.2f} of {outcome.cash:.2f}, saved {outcome.savings:.2f}. "
        f"Score {reward:.3f}."
    )
