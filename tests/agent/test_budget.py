"""Solver time budgets: a loop that never returns is stopped from outside."""

from __future__ import annotations

import threading
import time

import pytest

from agenttrain.agent.budget import BudgetExceeded, time_budget


def test_a_loop_that_never_returns_is_stopped_at_the_budget():
    started = time.perf_counter()
    expected = r"the test solver ran past its 0\.3 s budget"
    with pytest.raises(BudgetExceeded, match=expected), time_budget(0.3, "the test solver"):
        path, position = [], 0
        while True:  # what minigrid's bot does on BabyAI train task 188
            path.append(position)
            position = (position + 1) % 7
            if len(path) > 100_000:
                path.clear()
    assert time.perf_counter() - started < 5


def test_a_block_within_its_budget_is_untouched_and_nothing_fires_later():
    with time_budget(0.2, "quick"):
        total = sum(range(1000))
    time.sleep(0.4)  # past the budget: a late exception would surface here
    assert total == 499500


def test_a_budget_stops_only_its_own_thread():
    outcome = {}

    def other() -> None:
        time.sleep(0.6)
        outcome["other"] = "finished"

    worker = threading.Thread(target=other)
    worker.start()
    with pytest.raises(BudgetExceeded), time_budget(0.2, "busy"):
        while True:
            pass
    worker.join()
    assert outcome == {"other": "finished"}
