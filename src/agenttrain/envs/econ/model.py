"""The household model behind `econ`: one household's month, its utility, and how the economy moves.

Each month the household chooses `work` (the share of the month's 168 hours it works) and
`consumption` (the share of its cash on hand it spends), both in [0, 1]:

    income   y  = work · 168 · wage
    cash     m  = savings · (1 + interest) + (1 − tax_rate) · y + transfer
    spending x  = consumption · m,          savings' = m − x
    real consumption c = x / price

    utility  U  = u(c) − ψ · work² / 2  +  Σ_{k=1..H} β^k · u(ĉ)
    u(c)     = (1 − (1 + c/c̄)^(1−γ)) / (γ − 1)       (CRRA in 1 + c/c̄, γ = 2: c/(c + c̄))
    ĉ        = (1 + interest) · savings' / (H · price') + transfer / price'
    price'   = price · (1 + inflation)

The last term values what is saved: spread over the next H = 12 months, with the transfer
still paid, discounted by β. So a good decision smooths consumption (spends about what can
be spent every month of the year), works more when the wage after tax is high or the savings
low, and saves more when interest beats inflation. Every quantity is a pure function of the
task id (and the month, for the economy's shocks): tasks are deterministic.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

import numpy as np

HOURS = 168.0
"""Hours in a month's work at `work = 1`."""
NEEDS = 1000.0
"""c̄: the real consumption at which u reaches half of its ceiling."""
GAMMA = 2.0
WORK_COST = 0.6
"""ψ: the disutility of working all month, in units of u."""
BETA = 0.99
HORIZON = 12
"""H: the months that savings are spread over in the value of saving."""
DISCOUNTS = sum(BETA**k for k in range(1, HORIZON + 1))
TARGET_INFLATION = 0.002
NEUTRAL_INTEREST = 0.003
HISTORY = 3
"""Months of history the observation shows."""


@dataclass(frozen=True)
class Month:
    """What the household did in a past month."""

    work: float
    consumption: float
    income: float


@dataclass(frozen=True)
class Household:
    """The state at the start of a month: everything the decision depends on."""

    month: int
    savings: float
    wage: float
    """Nominal, per hour."""
    price: float
    inflation: float
    """Monthly; the price level moves by it at the end of this month."""
    interest: float
    """Monthly, paid on savings at the start of the month."""
    tax_rate: float
    transfer: float
    """Nominal, paid every month whatever the household does."""
    last_income: float
    history: tuple[Month, ...] = ()
    elapsed: int = 0
    """Months played since the task started (what seeds the next month's shocks)."""


@dataclass(frozen=True)
class Outcome:
    """One month played: what the decision earned, spent and left."""

    income: float
    tax: float
    cash: float
    spending: float
    real_consumption: float
    savings: float


def crra(real_consumption: float | np.ndarray) -> float | np.ndarray:
    """u(c) with γ = 2: bounded in [0, 1), u(c̄) = 1/2."""
    ratio = 1.0 + np.asarray(real_consumption) / NEEDS
    return (1.0 - ratio ** (1.0 - GAMMA)) / (GAMMA - 1.0)


def play(state: Household, work: float, consumption: float) -> Outcome:
    """The month's accounts for a decision."""
    income = work * HOURS * state.wage
    tax = state.tax_rate * income
    cash = state.savings * (1 + state.interest) + income - tax + state.transfer
    spending = consumption * cash
    return Outcome(income, tax, cash, spending, spending / state.price, cash - spending)


def utility(state: Household, work: np.ndarray, consumption: np.ndarray) -> np.ndarray:
    """U for arrays of decisions (the equations of the module docstring)."""
    income = work * HOURS * state.wage
    cash = state.savings * (1 + state.interest) + income * (1 - state.tax_rate) + state.transfer
    spending = consumption * cash
    next_price = state.price * (1 + state.inflation)
    later = (1 + state.interest) * (cash - spending) / (HORIZON * next_price)
    later = later + state.transfer / next_price
    now = crra(spending / state.price) - WORK_COST * work**2 / 2
    return now + DISCOUNTS * crra(later)


GRID = np.linspace(0.0, 1.0, 101)
"""The decisions the reward is measured against: every 0.01 of both fields."""


REGRET_SCALE = 0.1
"""δ: the regret (in units of u) at which a decision scores 1/2."""


@dataclass(frozen=True)
class Best:
    """The grid's best decision for a state and its utility."""

    work: float
    consumption: float
    utility: float


def best_decision(state: Household) -> Best:
    """Grid search over both fields (10,201 decisions, vectorised): the oracle's decision."""
    work, consumption = np.meshgrid(GRID, GRID, indexing="ij")
    values = utility(state, work, consumption)
    at = np.unravel_index(int(np.argmax(values)), values.shape)
    return Best(float(GRID[at[0]]), float(GRID[at[1]]), float(values[at]))


def regret(state: Household, work: float, consumption: float) -> float:
    """How much utility the decision loses against the grid's best (0 at best or above)."""
    value = float(utility(state, np.float64(work), np.float64(consumption)))
    return max(best_decision(state).utility - value, 0.0)


def score(state: Household, work: float, consumption: float) -> float:
    """The decision's reward in (0, 1]: δ / (δ + regret). 1 for the best decision, 1/2 for one
    losing δ = 0.1 (a tenth of the whole range of a month's u), → 0 as the loss grows."""
    return REGRET_SCALE / (REGRET_SCALE + regret(state, work, consumption))


def initial_household(task_id: int) -> Household:
    """Task `task_id`'s household and economy at its first month."""
    rng = random.Random(f"econ/{task_id}")  # str seeds hash with SHA-512: stable everywhere
    wage = round(rng.uniform(8.0, 40.0), 2)
    price = round(1.0 + rng.uniform(0.0, 0.5), 3)
    inflation = round(rng.uniform(-0.002, 0.012), 4)
    tax_rate = round(rng.uniform(0.05, 0.40), 3)
    transfer = round(rng.uniform(0.0, 600.0) * price, 2)
    savings = round(rng.random() ** 2 * 30 * HOURS * wage * 0.5, 2)
    history = tuple(
        Month(
            round(work, 2),
            round(rng.uniform(0.05, 0.9), 2),
            round(work * HOURS * wage * rng.uniform(0.9, 1.05), 2),
        )
        for work in (rng.uniform(0.2, 1.0) for _ in range(HISTORY))
    )
    return Household(
        month=rng.randint(1, 12),
        savings=savings,
        wage=wage,
        price=price,
        inflation=inflation,
        interest=policy_rate(inflation),
        tax_rate=tax_rate,
        transfer=transfer,
        last_income=history[-1].income,
        history=history,
    )


def policy_rate(inflation: float) -> float:
    """The central bank's monthly rate: a Taylor rule, 1.5 points per point of inflation above
    target, never below 0."""
    return round(max(0.0, NEUTRAL_INTEREST + 1.5 * (inflation - TARGET_INFLATION)), 4)


def next_month(state: Household, work: float, consumption: float, task_id: int) -> Household:
    """The state a month later: savings from the decision, prices up by inflation, wages
    indexed to half of inflation plus a shock, inflation drifting, the rate following it."""
    outcome = play(state, work, consumption)
    rng = random.Random(f"econ/{task_id}/month/{state.elapsed}")
    inflation = round(min(max(state.inflation + rng.gauss(0.0, 0.001), -0.004), 0.02), 4)
    wage = round(state.wage * (1 + 0.5 * state.inflation + rng.gauss(0.0, 0.01)), 2)
    done = Month(round(work, 2), round(consumption, 2), round(outcome.income, 2))
    return replace(
        state,
        month=state.month % 12 + 1,
        savings=round(outcome.savings, 2),
        wage=max(wage, 1.0),
        price=round(state.price * (1 + state.inflation), 4),
        inflation=inflation,
        interest=policy_rate(inflation),
        transfer=round(state.transfer * (1 + state.inflation), 2),
        last_income=round(outcome.income, 2),
        history=(*state.history, done)[-HISTORY:],
        elapsed=state.elapsed + 1,
    )
