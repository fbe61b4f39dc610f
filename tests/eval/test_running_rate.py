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


def test_the_engine_starts_episodes_in_request_order_which_the_estimate_relies_on():
    """With fewer slots than episodes, episodes start in the order requested, whatever
    order they end in; so an ended prefix of the play order is a random sample."""
    import asyncio

    from agenttrain.agent.experts import OracleExpert
    from agenttrain.agent.formats import get_format
    from agenttrain.envs import get_spec, make_env
    from agenttrain.policy.base import SamplingParams
    from agenttrain.policy.chat_adapter import ChatPolicyAdapter
    from agenttrain.rollout import EpisodeRequest, RolloutConfig, RolloutEngine

    started: list[int] = []
    ended: list[int] = []

    class RecordingResets:
        def __init__(self) -> None:
            self.inner = make_env("textcraft")

        async def reset(self, task_id, *args, **kwargs):
            started.append(task_id)
            return await self.inner.reset(task_id, *args, **kwargs)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    tasks = [543, 12, 140, 300, 7, 420, 99, 250]  # plans of different lengths
    oracle = ChatPolicyAdapter(OracleExpert("textcraft", get_format("react", "textcraft")))
    engine = RolloutEngine(
        oracle,
        get_spec("textcraft"),
        RecordingResets,
        RolloutConfig(max_in_flight=2, max_turns=60),
        SamplingParams(),
        on_episode=lambda trajectory: ended.append(trajectory.task_id),
    )
    asyncio.run(engine.run([EpisodeRequest(t, str(t)) for t in tasks]))
    asyncio.run(oracle.aclose())
    assert started == tasks
    assert ended != tasks  # they end out of order: the case the estimate is for
