"""The household model: accounts and reward checked by hand, deterministic tasks, the oracle."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from agenttrain.envs.econ.model import (
    Household,
    best_decision,
    initial_household,
    next_month,
    play,
    score,
    utility,
)

STATE = Household(
    month=3,
    savings=1000.0,
    wage=10.0,
    price=1.0,
    inflation=0.0,
    interest=0.0,
    tax_rate=0.1,
    transfer=100.0,
    last_income=800.0,
)


def test_month_accounts_follow_the_documented_equations():
    outcome = play(STATE, 0.5, 0.5)
    assert outcome.income == pytest.approx(0.5 * 168 * 10)  # 840
    assert outcome.tax == pytest.approx(84.0)
    assert outcome.cash == pytest.approx(1000 + 840 - 84 + 100)  # 1856
    assert outcome.spending == pytest.approx(928.0)
    assert outcome.savings == pytest.approx(928.0)
    with_interest = play(replace(STATE, interest=0.01, price=2.0), 0.0, 1.0)
    assert with_interest.cash == pytest.approx(1010 + 100)
    assert with_interest.real_consumption == pytest.approx(555.0)


def test_utility_by_hand():
    now = 1 - 1 / (1 + 928 / 1000)  # u(c) = c / (c + c̄) with γ = 2
    later = 1 - 1 / (1 + (928 / 12 + 100) / 1000)  # savings spread over 12 months + transfer
    discounts = sum(0.99**k for k in range(1, 13))
    expected = now - 0.6 * 0.5**2 / 2 + discounts * later
    assert float(utility(STATE, 0.5, 0.5)) == pytest.approx(expected)


def test_score_is_one_at_the_grid_optimum_and_half_at_a_regret_of_a_tenth():
    best = best_decision(STATE)
    assert score(STATE, best.work, best.consumption) == 1.0
    value = float(utility(STATE, 0.9, 0.9))
    regret = best.utility - value
    assert score(STATE, 0.9, 0.9) == pytest.approx(0.1 / (0.1 + regret))
    assert 0 < score(STATE, 1.0, 1.0) < score(STATE, best.work, min(best.consumption + 0.1, 1))


def test_the_best_decision_keeps_the_euler_equation():
    """u'(c) = (Σβ^k / 12) u'(ĉ) with u' ∝ (1 + c/c̄)^-2: a little more now than in each
    later month (impatience), on the 0.01 grid."""
    best = best_decision(STATE)
    outcome = play(STATE, best.work, best.consumption)
    each_later_month = outcome.savings / 12 + STATE.transfer  # no interest, no inflation
    patience = sum(0.99**k for k in range(1, 13)) / 12
    expected = (1 + each_later_month / 1000) / math.sqrt(patience)
    assert 1 + outcome.real_consumption / 1000 == pytest.approx(expected, rel=0.02)


def test_tasks_are_a_pure_function_of_the_task_id():
    assert initial_household(7) == initial_household(7)
    assert initial_household(7) != initial_household(8)
    state = initial_household(7)
    assert next_month(state, 0.4, 0.1, 7) == next_month(state, 0.4, 0.1, 7)
    later = next_month(state, 0.4, 0.1, 7)
    assert later.elapsed == 1 and later.price == pytest.approx(
        state.price * (1 + state.inflation), abs=1e-4
    )
    assert later.savings == pytest.approx(play(state, 0.4, 0.1).savings, abs=0.01)


def test_oracle_decisions_beat_constant_and_the_seeds_typical_decision():
    states = [initial_household(task) for task in range(1100, 1140)]
    oracle = [score(s, best_decision(s).work, best_decision(s).consumption) for s in states]
    constant = [score(s, 0.5, 0.5) for s in states]
    seed_like = [score(s, 0.83, 0.69) for s in states]
    assert min(oracle) == 1.0
    assert sum(constant) / len(constant) < 0.5
    assert sum(seed_like) / len(seed_like) < sum(constant) / len(constant)
    assert all(math.isfinite(v) for v in constant + seed_like)
