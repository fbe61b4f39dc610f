"""A time budget for solvers: a search that never returns becomes an episode's error.

Some expert solvers are third-party pure-Python code that can loop forever on rare tasks
(a third-party grid-world bot never finishes planning one training task). A budget must stop such a
loop from outside, without the solver's cooperation: when the time is up, a watchdog timer
raises `BudgetExceeded` inside the solver's thread (CPython's `PyThreadState_SetAsyncExc`,
delivered at the loop's next bytecode). The engine then records the episode as an
`agent_error` and the run goes on.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class BudgetExceeded(Exception):
    """A solver ran past its time budget."""


@contextmanager
def time_budget(limit_s: float, what: str) -> Iterator[None]:
    """Run the block in this thread for at most `limit_s`; past it, `BudgetExceeded` naming
    `what` is raised inside the block."""
    thread_id = threading.get_ident()
    lock = threading.Lock()
    state = {"running": True, "fired": False}

    def expire() -> None:
        with lock:
            if state["running"]:
                state["fired"] = True
                _raise_in(thread_id, BudgetExceeded)

    timer = threading.Timer(limit_s, expire)
    timer.daemon = True
    timer.start()
    try:
        yield
    except BudgetExceeded:
        raise BudgetExceeded(f"{what} ran past its {limit_s:g} s budget") from None
    finally:
        timer.cancel()
        with lock:
            state["running"] = False
            if state["fired"]:
                _raise_in(thread_id, None)  # withdraw an exception not yet delivered
    if state["fired"]:  # it fired as the block returned: the budget was spent all the same
        raise BudgetExceeded(f"{what} ran past its {limit_s:g} s budget")


def _raise_in(thread_id: int, exception: type[BaseException] | None) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exception) if exception else None
    )
