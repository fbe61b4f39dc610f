"""What both trainers share: progress a log file can read, and stopping on a signal."""

from __future__ import annotations

import io
import os
import signal

import pytest
from rich.console import Console
from rich.progress import Progress

from agenttrain.run.runtime import GracefulStop, PlainProgress, progress_display, step_progress


def piped_console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=80), out


def test_redirected_output_gets_one_plain_line_per_step_and_stage():
    console, out = piped_console()
    with step_progress(console) as progress:
        assert isinstance(progress, PlainProgress)
        bar = progress.add_task("training", total=3, completed=1, status="")
        progress.update(bar, status="step 2: playing 16 episodes")
        progress.update(bar, status="step 2: playing 16 episodes")  # no news: no line
        progress.update(bar, advance=1, status="reward 0.500 · loss 0.1")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("training 1/3 · step 2: playing 16 episodes · 0:00:")
    assert lines[1].startswith("training 2/3 · reward 0.500 · loss 0.1 · 0:00:")


def test_long_tasks_print_a_bounded_number_of_lines():
    console, out = piped_console()
    with progress_display(console, "solved {solved}", max_lines=4) as progress:
        bar = progress.add_task("oracle", total=10, solved=0)
        for solved in range(1, 11):
            progress.update(bar, advance=1, solved=solved)
    counts = [line.split(" · ")[0] for line in out.getvalue().splitlines()]
    assert counts == ["oracle 3/10", "oracle 6/10", "oracle 9/10", "oracle 10/10"]


def test_a_terminal_gets_the_live_bar():
    assert isinstance(step_progress(Console(file=io.StringIO(), force_terminal=True)), Progress)


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_and_sigterm_ask_to_stop_after_the_step(signum, code):
    console, out = piped_console()
    stop = GracefulStop(console)
    stop.install()
    try:
        os.kill(os.getpid(), signum)
        assert stop.requested and stop.exit_code == code
        assert "finishing this step, then saving a checkpoint" in out.getvalue()
        with pytest.raises(KeyboardInterrupt):  # a second one quits at once
            os.kill(os.getpid(), signum)
    finally:
        stop.restore()
    assert signal.getsignal(signum) != stop._handle
