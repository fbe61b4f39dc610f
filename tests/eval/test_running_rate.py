"""The success rate shown while `agenttrain eval` runs: unbiased by which episodes end first."""

from __future__ import annotations

from agenttrain.eval.running import RunningRate


def test_solved_episodes_that_end_first_do_not_inflate_the_shown_rate():
    """Ten episodes in play order, every other one solved. The solved ones end first (they
    take fewer turns), so the share among ended episodes reads 100% after five; the
    estimate waits for the play order's ended prefix and reads the true 50%."""
    order = list(range(10))
    success = [i % 2 == 0 for i in order]
    rate = RunningRate(order)
    for key in [0, 2, 4, 6, 8]:  # the solved ones end first
        rate.add(key, success[key])
    assert rate.solved / rate.ended == 1.0  # what the progress line used to show
    assert rate.estimate() == 1.0  # only episode 0 is an ended prefix so far
    rate.add(1, success[1])
    rate.add(3, success[3])
    assert rate.estimate() == 3 / 5  # episodes 0-4 have all ended: 0, 2, 4 solved
    for key in [5, 7, 9]:
        rate.add(key, success[key])
    assert rate.estimate() == 0.5 and rate.solved == 5 and rate.ended == 10


def test_the_progress_text_shows_the_count_and_the_estimate_once_there_is_one():
    rate = RunningRate(["a", "b"])
    assert rate.describe() == "0"
    rate.add("b", True)
    assert rate.describe() == "1"  # "a" has not ended: no unbiased estimate yet
    rate.add("a", False)
    assert rate.describe() == "1 · ~50%"
