"""Re-screening during a run (`data.frontier.rescreen_every`, with `keep: mixed`).

Screening before step 1 keeps the tasks the starting model both solved and failed. Training
then solves them: their groups stop differing and the informative share falls, while goals the
starting model never solved come within reach. Every `rescreen_every` steps the current policy
plays each task of the run's pool (its training tasks before the filter) `rescreen_samples`
times; the tasks it now both solves and fails are drawn from then on.

The episodes go to `screens/step-<N>.jsonl` in the run folder, written after step N (after its
checkpoint). A run resumed from checkpoint N reads that file rather than playing it again, and
one resumed later restores the kept set of the latest screening before its checkpoint, so a
resumed run draws the tasks an uninterrupted one would.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from agenttrain.rl.config import FrontierConfig
from agenttrain.rollout.engine import EpisodeRequest, derive_seed
from agenttrain.rollout.trajectory import Trajectory, write_jsonl

FOLDER = "screens"


def screen_path(run_dir: Path, step: int) -> Path:
    """Where the re-screening after step `step` keeps its episodes."""
    return run_dir / FOLDER / f"step-{step:06d}.jsonl"


def is_due(settings: FrontierConfig, step: int) -> bool:
    """Whether the run re-screens after step `step` (before the next one)."""
    every = settings.rescreen_every
    return bool(every) and step > 0 and step % every == 0


def latest_before(run_dir: Path, step: int) -> Path | None:
    """The latest re-screening written before checkpoint `step` was (after an earlier step):
    the kept set a run resumed from that checkpoint draws from."""
    earlier = [
        path
        for path in (run_dir / FOLDER).glob("step-*.jsonl")
        if int(path.stem.removeprefix("step-")) < step
    ]
    return max(earlier, default=None)


def screen_requests(
    pool: Mapping[str, Sequence[int]],
    samples: int,
    step: int,
    seed: int,
    turn_limits: Mapping[str, int],
) -> list[tuple[str, EpisodeRequest]]:
    """`samples` episodes of every pool task, one group a task; seeds depend on the run's
    seed, the step and the task, so a re-screening is reproducible."""
    return [
        (
            env,
            EpisodeRequest(
                task,
                group_id=f"screen-{step}:{env}:{task}",
                sample=sample,
                seed=derive_seed(seed, "screen", step, env, task),
                max_turns=turn_limits[env],
            ),
        )
        for env, tasks in pool.items()
        for task in tasks
        for sample in range(samples)
    ]


def write_screen(path: Path, episodes: Iterable[Trajectory]) -> None:
    """Write the episodes whole or not at all: a run stopped mid-write plays them again."""
    staging = path.with_suffix(".partial")
    write_jsonl(staging, episodes)
    staging.replace(path)
