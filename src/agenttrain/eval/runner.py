"""`agenttrain eval`: play tasks with one or more models and measure them the same way.

Every model sees the same tasks, seeds and sample counts, so the comparison table is
apples to apples (how base vs trained is judged). Models are loaded one at a time.
"""

from __future__ import annotations

import asyncio
import gc
import json
import random
import shutil
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from agenttrain.envs import get_spec
from agenttrain.envs.source import EnvSource
from agenttrain.eval.config import EvalConfig
from agenttrain.eval.metrics import differences_to_first, summarize
from agenttrain.eval.playing import env_source, play_here
from agenttrain.eval.resume import ModelFolder, episode_key
from agenttrain.eval.running import RunningRate
from agenttrain.policy.models import resolve
from agenttrain.rollout.engine import EpisodeRequest, RolloutConfig
from agenttrain.rollout.trajectory import Trajectory, read_jsonl
from agenttrain.run import checkpoint
from agenttrain.run.runtime import progress_display

PLAIN_PROGRESS_LINES = 20
"""Progress lines per model when the output is a log file rather than a terminal."""

ENV_ERROR_EXIT_CODE = 3
"""`agenttrain eval`'s exit status when a model's env-error share is above the limit."""


@dataclass
class ModelResult:
    model: str
    summary: dict[str, Any]
    episodes_path: Path
    wall_s: float


def over_env_error_limit(results: Sequence[ModelResult], limit: float) -> list[ModelResult]:
    """Models whose scores rest on too few episodes: the environment or the agent's side
    failed too often."""
    return [
        r
        for r in results
        if r.summary["env_error_rate"] + r.summary.get("agent_error_rate", 0.0) > limit
    ]


def play_order(requests: Sequence[EpisodeRequest]) -> list[EpisodeRequest]:
    """`requests` with their groups (a task under one seed) in a fixed random order, each
    group's samples kept together (they share their prompt's KV cache).

    Splits are often sorted by difficulty (TextCraft's test split by crafting depth), so
    playing them in order would make a stopped evaluation's kept episodes the easy ones; in
    this order they are a random sample of the tasks. Scores do not depend on the order:
    each episode samples from its own seed."""
    groups: dict[str, list[EpisodeRequest]] = {}
    for request in requests:
        groups.setdefault(request.group_id, []).append(request)
    order = sorted(groups)
    random.Random(0).shuffle(order)
    return [request for group in order for request in groups[group]]


def select_tasks(env: str, split: str, positions: Sequence[int] | None) -> list[int]:
    """Task ids: the split's (all ids for 'all'), optionally only those at `positions`."""
    spec = get_spec(env)
    if split == "all":
        if spec.num_tasks is None:
            raise ValueError(f"{env} has no fixed task count; pick a split or pass --tasks")
        ids: tuple[int, ...] = tuple(range(spec.num_tasks))
    else:
        ids = spec.split(split)
    if positions is None:
        return list(ids)
    outside = [p for p in positions if not 0 <= p < len(ids)]
    if outside:
        raise ValueError(
            f"--tasks positions {format_ranges(outside)} are outside the {split} split "
            f"(0-{len(ids) - 1})"
        )
    return [ids[p] for p in positions]


def parse_ranges(text: str) -> list[int]:
    """'0-4,7,10-11' -> [0, 1, 2, 3, 4, 7, 10, 11]."""
    values: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        low, _, high = part.partition("-")
        if not (low.isdigit() and (high.isdigit() or not high)) or int(high or low) < int(low):
            raise ValueError(f"{part!r} is not a number or a range low-high (e.g. 0-29,40)")
        values += list(range(int(low), int(high or low) + 1))
    return values


def format_ranges(values: Sequence[int]) -> str:
    """[0, 1, 2, 7, 9, 10] -> '0-2,7,9-10': what parse_ranges reads, and short to print."""
    runs: list[list[int]] = []
    for value in sorted(set(values)):
        if runs and value == runs[-1][1] + 1:
            runs[-1][1] = value
        else:
            runs.append([value, value])
    return ",".join(str(low) if low == high else f"{low}-{high}" for low, high in runs)


def expand_models(specs: Sequence[str]) -> list[str]:
    """A run folder stands for its newest checkpoint (the model the run ended with); a folder
    of checkpoints (a run's `checkpoints/`) for each checkpoint in it, oldest first."""
    expanded = []
    for spec in specs:
        folder = Path(spec)
        if folder.is_dir() and not _is_model(folder):
            run = (folder / "checkpoints").is_dir()
            inner = folder / "checkpoints" if run else folder
            children = sorted(
                (c for c in inner.iterdir() if c.is_dir() and _is_model(c)), key=_step
            )
            if children:
                expanded += [str(c) for c in (children[-1:] if run else children)]
                continue
        expanded.append(spec)
    return expanded


SETTING_FLAGS = {
    "env": "--env",
    "action_format": "--format",
    "prompt_style": "--prompt-style",
    "max_new_tokens": "--max-new-tokens",
    "max_turns": "--max-turns",
    "max_context": "--max-context",
    "system_prompt": "system prompt",
}
"""What a checkpoint records about how its model acts (see `checkpoint.save`), and the eval
flag that sets each."""


def builtin_settings() -> dict[str, Any]:
    """What eval uses for a setting no flag and no checkpoint gives."""
    rollout = RolloutConfig()
    return {
        "env": EvalConfig.model_fields["env"].default,
        **{key: getattr(rollout, key) for key in SETTING_FLAGS if key != "env"},
    }


def recorded_settings(models: Sequence[str], given: Mapping[str, Any]) -> dict[str, Any]:
    """The settings the checkpoints among `models` were trained with, for those not `given`
    (None = not given). Checkpoints that disagree on one are an error naming its flag."""
    seen: dict[str, dict[Any, str]] = {}
    for model in expand_models(models):
        for key, value in _generation(Path(model)).items():
            if key in SETTING_FLAGS and given.get(key) is None:
                seen.setdefault(key, {}).setdefault(value, model)
    for key, values in seen.items():
        if len(values) > 1:
            listed = "; ".join(f"{value!r} ({model})" for value, model in values.items())
            raise ValueError(
                f"the checkpoints were trained with different {SETTING_FLAGS[key]} values "
                f"({listed}); pass {SETTING_FLAGS[key]} to evaluate them the same way"
            )
    return {key: next(iter(seen[key])) for key in SETTING_FLAGS if key in seen}


def describe_settings(settings: Mapping[str, Any]) -> str:
    """Settings as the flags that would give them (the system prompt by name only)."""
    return ", ".join(
        "its system prompt" if key == "system_prompt" else f"{SETTING_FLAGS[key]} {value}"
        for key, value in settings.items()
    )


def _generation(folder: Path) -> dict[str, Any]:
    """The generation settings in a checkpoint's agenttrain.json (none for other models)."""
    for meta in (folder / "model" / "agenttrain.json", folder / "agenttrain.json"):
        if meta.is_file():
            return dict(json.loads(meta.read_text()).get(checkpoint.GENERATION, {}))
    return {}


def _is_model(folder: Path) -> bool:
    return any(
        (folder / sub / name).exists()
        for sub in ("", "model")
        for name in ("config.json", "adapter_config.json")
    )


def _step(folder: Path) -> tuple[int, str]:
    digits = "".join(ch for ch in folder.name if ch.isdigit())
    return (int(digits) if digits else -1, folder.name)


def slug(model: str) -> str:
    keep = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in model.strip("/"))
    return keep[-80:] or "model"


def evaluate(config: EvalConfig, console: Console | None = None) -> list[ModelResult]:
    console = console or Console()
    tasks = select_tasks(config.env, config.split, config.tasks)
    requests = [
        EpisodeRequest(task, group_id=f"{task}-s{seed}", sample=sample, seed=seed)
        for seed in config.seeds
        for task in tasks
        for sample in range(config.n)
    ]
    models = expand_models(config.models)
    for model in models:  # fail on a typo before spending an hour on the first model
        resolve(model)
    envs = env_source(config)
    loop = asyncio.new_event_loop()  # one loop, so one HTTP pool serves every model
    created = not config.out.exists()
    results: list[ModelResult] = []
    stop = StopSignals(loop)
    try:
        with stop:
            _evaluate_all(config, envs, loop, tasks, models, requests, results, console)
    except (KeyboardInterrupt, asyncio.CancelledError):  # Ctrl-C or SIGTERM: keep what finished
        _cancel_pending(loop)  # the episodes in flight close their sessions
        kept = sum(len(f.read_text().splitlines()) for f in config.out.glob("*/episodes*.jsonl"))
        raise EvalStopped(
            f"stopped; {kept} finished episodes are kept in {config.out}; run the same "
            "command again to play the rest",
            128 + (stop.signum or signal.SIGINT),
        ) from None
    except BaseException:
        if created and not any(config.out.glob("*/episodes*.jsonl")):
            shutil.rmtree(config.out, ignore_errors=True)  # a failed eval leaves no empty folder
        raise
    finally:
        loop.run_until_complete(envs.aclose())
        loop.close()
    differences = differences_to_first(
        {r.model: list(read_jsonl(r.episodes_path)) for r in results}
    )
    summaries = {r.model: r.summary for r in results}
    for model, difference in differences.items():
        summaries[model]["difference_to_first"] = difference
    (config.out / "summary.json").write_text(json.dumps(summaries, indent=2))
    return results


def _evaluate_all(
    config: EvalConfig,
    envs: EnvSource,
    loop: asyncio.AbstractEventLoop,
    tasks: list[int],
    models: list[str],
    requests: list[EpisodeRequest],
    results: list[ModelResult],
    console: Console,
) -> None:
    spec = get_spec(config.env)
    loop.run_until_complete(envs.open(tasks))  # wrong or incomplete servers fail here
    config.out.mkdir(parents=True, exist_ok=True)
    (config.out / "config.json").write_text(config.model_dump_json(indent=2))
    for model in models:
        console.print(
            f"[bold]{model}[/]: {len(tasks)} {spec.display_name} tasks × "
            f"{config.n} samples × {len(config.seeds)} seeds = {len(requests)} episodes "
            f"({envs.describe()})"
        )
        results.append(_evaluate_model(config, envs, loop, model, requests, console))
        gc.collect()


class EvalStopped(Exception):
    """Ctrl-C or SIGTERM stopped an evaluation; what finished is kept."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class StopSignals:
    """Ctrl-C and SIGTERM during an evaluation: while episodes play, cancel them (each closes
    its environment session as it unwinds); otherwise raise KeyboardInterrupt. A second
    signal stops at once."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        for signum in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[signum] = signal.signal(signum, self._handle)
            except ValueError:  # not the main thread: leave signals alone
                break
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)

    def _handle(self, signum: int, frame: Any) -> None:
        first = self.signum is None
        self.signum = signum
        if first and self.loop.is_running():
            self.loop.call_soon_threadsafe(_cancel_all, self.loop)
            return
        raise KeyboardInterrupt


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    for task in asyncio.all_tasks(loop):
        task.cancel()


def _cancel_pending(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the episodes in flight and let them close their sessions."""
    # the task the interrupt landed in is done (with it): only the others are waited for
    pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))


def _evaluate_model(
    config: EvalConfig,
    envs: EnvSource,
    loop: asyncio.AbstractEventLoop,
    model: str,
    requests: list[EpisodeRequest],
    console: Console,
) -> ModelResult:
    spec = get_spec(config.env)
    # Guesses and workers change the speed, not the distribution of what is sampled: not
    # settings that make earlier episodes in the folder incomparable.
    speed_only = {"draft_tokens", "workers"}
    settings = config.model_dump(mode="json", exclude={"models", "out", "replace", *speed_only})
    record = ModelFolder(config.out / slug(model), {**settings, "model": model}, config.replace)
    done = record.finished()
    todo = [r for r in play_order(requests) if episode_key(r.task_id, r.seed, r.sample) not in done]
    if done:
        console.print(f"{len(done)} episodes already played, {len(todo)} to go ({record.folder})")
    started = time.perf_counter()
    trajectories, engine_stats, has_tokens = (
        _play(config, envs, loop, model, todo, console, record) if todo else ([], {}, True)
    )
    wall = time.perf_counter() - started
    played = {**done, **{episode_key(t.task_id, t.seed, t.sample): t for t in trajectories}}
    ordered = [played[episode_key(r.task_id, r.seed, r.sample)] for r in requests]
    episodes = record.complete(ordered)
    summary = summarize(ordered, group_by=spec.breakdown_key)
    generate_s = engine_stats.get("generate_s") or 1e-9
    summary.update(
        model=model,
        env=config.env,
        split=config.split,
        wall_s=round(wall, 2),
        generate_s=round(engine_stats.get("generate_s", 0.0), 2),
        tokens_per_s=round(engine_stats.get("generated_tokens", 0) / generate_s, 1)
        if has_tokens and engine_stats
        else None,
    )
    (record.folder / "summary.json").write_text(json.dumps(summary, indent=2))
    return ModelResult(model, summary, episodes, wall)


def _play(
    config: EvalConfig,
    envs: EnvSource,
    loop: asyncio.AbstractEventLoop,
    model: str,
    requests: list[EpisodeRequest],
    console: Console,
    record: ModelFolder,
) -> tuple[list[Trajectory], dict[str, Any], bool]:
    """Play `requests` with `model`, here or in `config.workers` processes: (trajectories,
    engine stats, whether it has tokens). Each episode is appended to the model's partial file
    as it ends."""
    started = time.perf_counter()
    played: list[Trajectory] = []
    tokens = 0  # generated by the episodes ended so far
    display = progress_display(console, "solved {solved} {speed}", max_lines=PLAIN_PROGRESS_LINES)
    with display as progress:
        bar = progress.add_task(model[-40:], total=len(requests), solved="0", speed="")
        rate = RunningRate([episode_key(r.task_id, r.seed, r.sample) for r in requests])

        def on_episode(trajectory: Trajectory) -> None:
            nonlocal tokens
            record.append(trajectory)
            played.append(trajectory)
            rate.add(
                episode_key(trajectory.task_id, trajectory.seed, trajectory.sample),
                trajectory.success,
            )
            tokens += trajectory.generated_tokens
            speed = f"{tokens / (time.perf_counter() - started):.0f} tok/s" if tokens else ""
            progress.update(bar, advance=1, solved=rate.describe(), speed=speed)

        if config.workers > 1 and len(requests) > 1:
            import torch

            from agenttrain.eval.workers import play_in_workers

            threads = max(1, torch.get_num_threads() // config.workers)
            stats, has_tokens = play_in_workers(config, model, requests, on_episode, threads)
        else:
            stats, has_tokens = play_here(config, envs, loop, model, requests, on_episode)
    return played, stats, has_tokens
