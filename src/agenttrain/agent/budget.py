"""A time budget for solvers: a search that never returns becomes an episode's error.

Some expert solvers are third-party pure-Python code that can loop forever on rare tasks
(a third-party grid-world bot never finishes planning one training task). A budget must stop such a
loop from outside, without the solver's cooperation: when the time is up, a watchdog thread
raises `BudgetExceeded` inside the solver's thread (CPython's `PyThreadState_SetAsyncExc`,
delivered at the loop's next bytecode). The engine then records the episode as an
`agent_error` and the run goes on.

The budget counts the solver thread's own CPU time, not the clock: on a loaded machine (a
test suite beside a training run) a plan that takes 4 s of CPU can take 20 s of wall time,
and an oracle must not fail a task it solves because other work shared the cores. A solver
that waits instead of computing is still stopped after `WALL_FACTOR` times the budget.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

WALL_FACTOR = 30.0
"""A block that uses little CPU (it waits) is stopped after this many budgets of wall time."""
POLL_S = 0.05


class BudgetExceeded(Exception):
    """A solver ran past its time budget."""


class _Expired(BaseException):
    """What the watchdog raises inside the solver's thread. Not an `Exception`: a solver's
    own `except Exception` (a grid-world oracle keeps what its third-party bot planned when
    the bot gives up) must not swallow it, or the loop it interrupts goes on with no budget
    left to stop it. `time_budget` turns it into `BudgetExceeded` at the block's edge."""


@contextmanager
def time_budget(limit_s: float, what: str) -> Iterator[None]:
    """Run the block in this thread for at most `limit_s` seconds of its CPU time; past it,
    `BudgetExceeded` naming `what` is raised inside the block."""
    thread_id = threading.get_ident()
    spent = _cpu_clock(thread_id)
    lock = threading.Lock()
    state = {"running": True, "fired": False}
    done = threading.Event()

    def watch() -> None:
        started_wall, started_cpu = time.monotonic(), spent()
        while not done.wait(POLL_S):
            over_cpu = spent() - started_cpu >= limit_s
            over_wall = time.monotonic() - started_wall >= limit_s * WALL_FACTOR
            if over_cpu or over_wall:
                with lock:
                    if state["running"]:
                        state["fired"] = True
                        _raise_in(thread_id, _Expired)
                return

    watchdog = threading.Thread(target=watch, daemon=True)
    watchdog.start()
    try:
        yield
    except _Expired:
        raise BudgetExceeded(f"{what} ran past its {limit_s:g} s budget") from None
    finally:
        done.set()
        with lock:
            state["running"] = False
            if state["fired"]:
                _raise_in(thread_id, None)  # withdraw an exception not yet delivered
    if state["fired"]:  # it fired as the block returned: the budget was spent all the same
        raise BudgetExceeded(f"{what} ran past its {limit_s:g} s budget")


def _cpu_clock(thread_id: int) -> Callable[[], float]:
    """The CPU seconds the thread has used (its wall clock where the OS has no such clock)."""
    try:
        clock = time.pthread_getcpuclockid(thread_id)
        time.clock_gettime(clock)
    except (AttributeError, OSError):
        return time.monotonic
    return lambda: time.clock_gettime(clock)


def _raise_in(thread_id: int, exception: type[BaseException] | None) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exception) if exception else None
    )
