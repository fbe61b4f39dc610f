"""The `agenttrain` command. Each command is a thin wrapper over a module function."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from agenttrain import __version__

app = typer.Typer(
    help="Train LLM agents with online RL in AgentGym-style text environments.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_show_locals=False,
)
console = Console()

ServerOption = Annotated[
    list[str] | None,
    typer.Option(
        "--server",
        help="URL of an AgentGym-compatible server (repeat for several); default: in-process.",
    ),
]
ActionFormat = Literal["react", "adapt", "json", "raw"]
TokenOption = Annotated[
    str | None,
    typer.Option(envvar="AGENTTRAIN_SERVER_TOKEN", help="Bearer token of the server(s)."),
]

AllowConfigChangeOption = Annotated[
    bool,
    typer.Option(
        "--allow-config-change",
        help="Resume a run with settings other than its config.yaml (the old one is kept in "
        "config-history/). Not needed for trainer.total_steps, save/test/eval frequencies, "
        "loggers and env.servers.",
    ),
]


def _version(value: bool) -> None:
    if value:
        console.print(f"agenttrain {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    """agenttrain: environments, rollouts, GRPO training and evaluation for LLM agents."""


@app.command()
def envs() -> None:
    """List the environments, whether they run here, their task splits, what each needs
    otherwise and the command that starts AgentGym's own server for it.

    Example: agenttrain envs
    """
    from agenttrain.envs import registrations

    table = Table(title="agenttrain environments")
    for column in ("name", "runs here", "tasks", "splits", "max turns", "AgentGym wire"):
        table.add_column(column)
    notes = []
    for entry in registrations():
        spec = entry.spec
        splits = " · ".join(f"{name} {len(ids)}" for name, ids in spec.splits().items())
        runs = "[green]in-process[/]" if entry.in_process else "[yellow]AgentGym server[/]"
        notes.append(_environment_note(spec.name, entry.in_process, spec.requirements))
        options = entry.options() if entry.in_process else {}
        if options:
            listed = ", ".join(f"{k}={v!r}" for k, v in options.items())
            notes.append(f"  options (serve --env-kwarg K=V, env.kwargs): {listed}")
        proto = spec.protocol
        table.add_row(
            spec.name,
            runs,
            str(spec.num_tasks or "-"),
            splits or "-",
            str(spec.default_max_turns),
            f"{proto.id_field} / {proto.task_field}",
        )
    console.print(table)
    for note in notes:
        console.print(note, highlight=False)


def _env_kwargs(pairs: list[str]) -> dict[str, Any]:
    """`KEY=VALUE` pairs as constructor options; values read as YAML (true, 3, 0.5, text)."""
    import yaml

    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--env-kwarg {pair!r}: expected KEY=VALUE, e.g. agentgym_compat=true")
        options[key.strip()] = yaml.safe_load(value) if value else ""
    return options


def _environment_note(name: str, in_process: bool, requirements: str) -> str:
    """One environment's line under `agenttrain envs`: where it runs, what it needs
    otherwise, and how AgentGym's own server for it starts."""
    from agenttrain.envs.agentgym import agentgym_server_command

    where = "runs here" if in_process else "not here"
    needs = f" ({requirements})" if requirements else ""
    command = agentgym_server_command(name)
    if command is None:
        return f"[bold]{name}[/]: {where}{needs}; AgentGym has no server for it"
    port = command.rsplit("--port ", 1)[-1]
    return (
        f"[bold]{name}[/]: {where}{needs}; AgentGym's server: `{command}`, "
        f"then --server http://127.0.0.1:{port}"
    )


@app.command()
def serve(
    env: Annotated[str, typer.Argument(help="Environment to serve, e.g. textcraft.")],
    host: Annotated[str, typer.Option(help="Interface to bind; 0.0.0.0 exposes it.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port; 0 picks a free one.")] = 36001,
    max_sessions: Annotated[int, typer.Option(min=1, help="Live sessions allowed at once.")] = 1024,
    session_ttl: Annotated[
        float, typer.Option(min=1, help="Close sessions idle for this many seconds.")
    ] = 1800.0,
    token: TokenOption = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "warning",
    access_log: Annotated[bool, typer.Option(help="Log every request.")] = False,
    workers: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Run sessions in this many worker processes (SciWorld always does; default 4).",
        ),
    ] = None,
    env_kwarg: Annotated[
        list[str] | None,
        typer.Option(
            "--env-kwarg",
            help="An environment option KEY=VALUE (YAML value), repeatable; `agenttrain envs` "
            "lists each environment's options.",
        ),
    ] = None,
) -> None:
    """Serve an environment over AgentGym's HTTP protocol (unmodified AgentGym clients work).

    Example: agenttrain serve textcraft --host 127.0.0.1 --port 36001
    AgentGym's BabyAI exactly (its defects kept): agenttrain serve babyai --port 36005
    --env-kwarg agentgym_compat=true
    """
    from agenttrain.envs.base import EnvError
    from agenttrain.serving.runner import PortInUse
    from agenttrain.serving.runner import serve as run_server

    logging.basicConfig(level=log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    try:
        env_kwargs = _env_kwargs(env_kwarg or [])
        run_server(
            env,
            host=host,
            port=port,
            max_sessions=max_sessions,
            session_ttl_s=session_ttl,
            token=token,
            log_level=log_level,
            access_log=access_log,
            workers=workers,
            env_kwargs=env_kwargs,
        )
    except (PortInUse, ValueError, KeyError, EnvError) as problem:
        console.print(f"[red]error:[/] {problem}")
        raise typer.Exit(2) from None


@app.command()
def play(
    env: Annotated[str, typer.Argument(help="Environment, e.g. textcraft.")],
    task: Annotated[int, typer.Option(help="Task id to play.")] = 0,
    server: ServerOption = None,
    token: TokenOption = None,
    max_turns: Annotated[int | None, typer.Option(help="Turn limit (default: the env's).")] = None,
) -> None:
    """Play one episode yourself in the terminal.

    Example: agenttrain play textcraft --task 12
    """
    from agenttrain.envs.base import EnvError
    from agenttrain.play import play as play_episode

    try:
        asyncio.run(
            play_episode(
                env, task, servers=server or [], token=token, max_turns=max_turns, console=console
            )
        )
    except (EnvError, KeyError, RuntimeError) as problem:
        console.print(f"[red]error:[/] {problem}")
        raise typer.Exit(2) from None


@app.command()
def selfplay(
    split: Annotated[str, typer.Option(help="TextCraft split to play.")] = "test",
    concurrency: Annotated[int, typer.Option(min=1, help="Episodes in flight.")] = 16,
) -> None:
    """Check the environment stack: a TextCraft server, the oracle playing a split through it.

    Example: agenttrain selfplay --split test
    """
    from agenttrain.selfplay import run_demo

    raise typer.Exit(run_demo(split=split, concurrency=concurrency, console=console))


def _spec_format(env: str, fallback: str) -> str:
    """The environment's own action format (econ, largest: raw JSON/answers), so its format rule
    applies without `--format`; `fallback` for an unknown name (reported later, with choices)."""
    from agenttrain.envs import get_spec

    try:
        own = get_spec(env).action_format
    except (KeyError, ValueError):
        return fallback
    return own if own in ("react", "adapt", "json", "raw") else fallback


@app.command("eval")
def eval_command(
    model: Annotated[
        list[str] | None,
        typer.Option(
            "--model",
            "-m",
            help="Model spec (repeat to compare): smollm2-135m, a model "
            "or checkpoint folder, a folder of checkpoints, openai:<model>, oracle.",
        ),
    ] = None,
    env: Annotated[
        str | None, typer.Option(help="Environment. Default: the checkpoint's, else textcraft.")
    ] = None,
    split: Annotated[str, typer.Option(help="Task split, or 'all'.")] = "test",
    tasks: Annotated[
        str | None, typer.Option(help="Positions within the split, e.g. 0-29,40.")
    ] = None,
    n: Annotated[
        int, typer.Option("--samples", "-n", min=1, help="Samples per task and seed.")
    ] = 1,
    seeds: Annotated[str, typer.Option(help="Comma-separated sampling seeds, e.g. 0,1.")] = "0",
    temperature: Annotated[float, typer.Option(min=0, help="0 = greedy.")] = 0.7,
    top_p: Annotated[float, typer.Option(min=0.01, max=1)] = 1.0,
    max_turns: Annotated[
        int | None, typer.Option(min=1, help="Default: the checkpoint's, else the env's.")
    ] = None,
    max_new_tokens: Annotated[
        int | None, typer.Option(min=1, help="Per model turn. Default: the checkpoint's, else 256.")
    ] = None,
    max_context: Annotated[
        int | None,
        typer.Option(min=64, help="Tokens per episode. Default: the checkpoint's, else 4096."),
    ] = None,
    action_format: Annotated[
        ActionFormat | None,
        typer.Option("--format", help="Default: the checkpoint's, else react."),
    ] = None,
    prompt_style: Annotated[
        Literal["agenttrain", "agentgym"] | None,
        typer.Option(help="agenttrain (bugs fixed) or agentgym (verbatim). Default: agenttrain."),
    ] = None,
    backend: Annotated[Literal["hf", "vllm", "openai"], typer.Option()] = "hf",
    device: Annotated[str, typer.Option(help="cpu or cuda.")] = "cpu",
    dtype: Annotated[
        Literal["auto", "float32", "bfloat16"], typer.Option(help="Generation precision.")
    ] = "auto",
    concurrency: Annotated[int, typer.Option(min=1, help="Episodes in flight.")] = 32,
    server: ServerOption = None,
    token: TokenOption = None,
    openai_base_url: Annotated[str | None, typer.Option(envvar="OPENAI_BASE_URL")] = None,
    max_env_error_rate: Annotated[
        float,
        typer.Option(
            min=0,
            max=1,
            help="Exit with status 3 (after writing every file) if a model lost a larger "
            "share of its episodes to environment errors.",
        ),
    ] = 0.05,
    out: Annotated[
        Path | None,
        typer.Option(
            help="Output folder (default runs/eval-<time>). An evaluation stopped there "
            "continues with the episodes it lacks."
        ),
    ] = None,
    replace: Annotated[
        bool,
        typer.Option(help="Discard an evaluation of a model in --out made with other settings."),
    ] = False,
) -> None:
    """Evaluate one or more models on the same tasks and seeds: success, pass@k, avg@k, report.

    Episodes are kept as they end: after Ctrl-C (or SIGTERM) the same command with the same
    --out plays only the missing ones.

    A checkpoint recorded how its model was trained to act (environment, action format,
    token and turn limits, system prompt); those are the defaults of the matching flags.

    Exit status: 0 done, 2 bad options, 3 too many environment errors (--max-env-error-rate).

    Example: agenttrain eval --env textcraft --split test --tasks 0-29 --model smollm2-135m -n 4
    """
    import sys
    import time

    from pydantic import ValidationError

    from agenttrain.envs.base import EnvError
    from agenttrain.eval.report import env_error_lines, write_report
    from agenttrain.eval.runner import (
        ENV_ERROR_EXIT_CODE,
        SETTING_FLAGS,
        EvalConfig,
        EvalStopped,
        builtin_settings,
        describe_settings,
        evaluate,
        over_env_error_limit,
        recorded_settings,
    )
    from agenttrain.policy.base import PolicyError
    from agenttrain.rollout.engine import RolloutConfig

    models = model or ["smollm2-135m"]
    given = {
        "env": env,
        "action_format": action_format,
        "prompt_style": prompt_style,
        "max_new_tokens": max_new_tokens,
        "max_turns": max_turns,
        "max_context": max_context,
    }
    try:
        recorded = recorded_settings(models, given)
        settings = {
            **builtin_settings(),
            **recorded,
            **{key: value for key, value in given.items() if value is not None},
        }
        if action_format is None and "action_format" not in recorded:
            settings["action_format"] = _spec_format(settings["env"], settings["action_format"])
        if recorded:
            console.print(
                f"as the checkpoint was trained: {describe_settings(recorded)}", highlight=False
            )
        config = EvalConfig(
            env=settings["env"],
            split=split,
            tasks=_positions("--tasks", tasks),
            models=models,
            backend=backend,
            n=n,
            seeds=_positions("--seeds", seeds),
            temperature=temperature,
            top_p=top_p,
            rollout=RolloutConfig(
                **{key: settings[key] for key in SETTING_FLAGS if key != "env"},
                max_in_flight=concurrency,
            ),
            servers=server or [],
            token=token,
            device=device,
            inference_dtype=dtype,
            openai_base_url=openai_base_url,
            max_env_error_rate=max_env_error_rate,
            out=out or Path("runs") / time.strftime("eval-%Y%m%d-%H%M%S"),
            replace=replace,
        )
        results = evaluate(config, console)
    except (ValidationError, ValueError, KeyError, PolicyError, EnvError) as problem:
        console.print(f"[red]error:[/] {problem}", highlight=False)
        raise typer.Exit(2) from None
    except EvalStopped as stopped:
        again = "" if out else f" (add --out {config.out})"
        console.print(f"[yellow]{stopped}{again}[/]", highlight=False)
        raise typer.Exit(stopped.exit_code) from None
    from agenttrain.envs import get_spec

    report = write_report(
        config.out,
        results,
        config,
        "agenttrain " + " ".join(sys.argv[1:]),
        get_spec(config.env).breakdown_key,
    )
    console.print(_summary_table(results))
    console.print(SUMMARY_NOTE, highlight=False)
    console.print(_intervals_table(results))
    note = INTERVAL_NOTE + (" " + DIFFERENCE_NOTE if len(results) > 1 else "")
    console.print(note, highlight=False, markup=False)
    for line in env_error_lines({r.model: r.summary for r in results}):
        console.print(f"[bold red]errors:[/] {line}", highlight=False)
    console.print(f"Report: {report}\nEpisodes: {', '.join(str(r.episodes_path) for r in results)}")
    over = over_env_error_limit(results, config.max_env_error_rate)
    if over:
        console.print(
            f"[red]error:[/] more than {config.max_env_error_rate:.1%} of the episodes of "
            f"{', '.join(r.model for r in over)} ended in environment or agent errors "
            "(--max-env-error-rate); their scores rest on too few episodes"
        )
        raise typer.Exit(ENV_ERROR_EXIT_CODE)


def _positions(flag: str, text: str | None) -> list[int] | None:
    """A flag's positions list (`0-29,40`); a malformed one is a usage error naming the flag."""
    from agenttrain.eval.runner import parse_ranges

    if text is None:
        return None
    try:
        return parse_ranges(text)
    except ValueError as problem:
        raise typer.BadParameter(str(problem), param_hint=flag) from None


SUMMARY_TITLES = {
    "success_rate": "scored",
    "success_rate_all": "all",
    "mean_turns": "turns",
    "format_error_rate": "fmt err",
    "errors": "err e+a",
    "tokens_per_s": "tok/s",
}
"""Short column titles, so an 80-column terminal shows every one whole; the caption says
what they count."""
SUMMARY_NOTE = (
    "success rate, scored: over episodes without an environment or agent error; all: over "
    "every episode, each error a failure; '-': no episode to count. fmt err: share of turns "
    "with a format error; err e+a: episodes lost to environment errors + to the agent's side "
    "raising (a solver, a parser, the policy), each listed in the report."
)
INTERVAL_NOTE = "[low, high]: 95% bootstrap interval over tasks."
DIFFERENCE_NOTE = (
    "Δ vs first: minus the first model over the tasks both played, with a paired interval "
    "(the same tasks drawn for both); * it excludes 0."
)


def _summary_table(results: list) -> Table:
    from agenttrain.eval.report import at_k_keys, metric_cell

    passes = [k for k in at_k_keys([r.summary for r in results]) if k.startswith("pass@")]
    keys = [
        "success_rate",
        "success_rate_all",
        *dict.fromkeys(passes[:1] + passes[-1:]),  # pass@1 and the largest k; all in report.md
        "mean_turns",
        "format_error_rate",
        "errors",
        "tokens_per_s",
    ]
    table = Table(title="evaluation", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    table.add_column("model", overflow="fold", min_width=12)
    for key in keys:
        title = SUMMARY_TITLES.get(key, key)
        table.add_column(title, justify="right", min_width=len(title), no_wrap=True)
    for result in results:
        s = result.summary
        cells = [
            f"{s.get('env_errors', 0)}+{s.get('agent_errors', 0)}"
            if key == "errors"
            else metric_cell(s, key, False)
            for key in keys
        ]
        table.add_row(result.model, *cells)
    return table


def _intervals_table(results: list) -> Table:
    """Success with its interval, and each later model's paired difference to the first: a
    table of its own, so the headline table keeps to 80 columns."""
    from agenttrain.eval.report import difference_cell, metric_cell

    table = Table(
        title="success (scored), 95% intervals",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    table.add_column("model", overflow="fold", min_width=12)
    table.add_column("success", justify="right", no_wrap=True)
    if len(results) > 1:
        table.add_column("tasks", justify="right", no_wrap=True)
        table.add_column("Δ vs first", justify="right", no_wrap=True)
    for result in results:
        row = [result.model, metric_cell(result.summary, "success_rate")]
        if len(results) > 1:
            difference = result.summary.get("difference_to_first", {}).get("success_rate")
            row += [str(difference["tasks"]) if difference else "-", difference_cell(difference)]
        table.add_row(*row)
    return table


@app.command()
def compare(
    runs: Annotated[
        list[Path],
        typer.Argument(
            help="Evaluations: `agenttrain eval` output folders (every model in each), one "
            "model's folder, or episodes.jsonl files. The first run is the baseline.",
            show_default=False,
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(help="Folder for compare.md and compare.png (default runs/compare-<time>)."),
    ] = None,
) -> None:
    """Compare evaluations: success with 95% intervals, reward, parse rate, format errors,
    turns, env errors, and each run minus the first over the tasks both played. Where actions
    are JSON objects: JSON parse rate, share of -1 rewards, and each numeric field's
    distribution (mean, std, quantiles, plot, Kolmogorov-Smirnov test against the first).

    Exit status: 0 done, 2 an argument is not an evaluation or shares no task with the first.

    Example: agenttrain compare runs/eval-base runs/eval-trained --out runs/compare
    """
    import sys
    import time

    from agenttrain.eval.compare import (
        TERMINAL_NOTE,
        CompareError,
        decision_tables,
        differences_table,
        runs_table,
        write_markdown,
    )
    from agenttrain.eval.compare import compare as compare_runs

    try:
        comparison = compare_runs(runs)
    except CompareError as problem:
        raise _refusal(problem) from None
    folder = out or Path("runs") / time.strftime("compare-%Y%m%d-%H%M%S")
    report = write_markdown(comparison, folder, "agenttrain " + " ".join(sys.argv[1:]))
    console.print(runs_table(comparison))
    console.print(differences_table(comparison))
    console.print(TERMINAL_NOTE, highlight=False, markup=False)
    for table in decision_tables(comparison.decisions) if comparison.decisions else []:
        console.print(table)
    console.print(f"Report: {report}", soft_wrap=True)


@app.command()
def show(
    file: Annotated[Path, typer.Argument(help="A trajectories JSONL file (e.g. episodes.jsonl).")],
    index: Annotated[int, typer.Option(help="Which episode (0-based line number).")] = 0,
    episode: Annotated[str | None, typer.Option(help="Pick by episode id instead.")] = None,
    full: Annotated[bool, typer.Option(help="Show the whole conversation start.")] = False,
    tokens: Annotated[
        str | None,
        typer.Option(help="Model/tokenizer spec: also show the tokens, trained-on ones in bold."),
    ] = None,
) -> None:
    """Print one episode as a readable, coloured transcript.

    Example: agenttrain show runs/eval-x/smollm2-135m/episodes.jsonl --index 3
    """
    from agenttrain.rollout.show import show as show_episode
    from agenttrain.rollout.trajectory import read_jsonl

    if not file.exists():
        console.print(f"[red]error:[/] no such file: {file}")
        raise typer.Exit(2)
    try:
        trajectories = list(read_jsonl(file))
    except ValueError as problem:
        console.print(f"[red]error:[/] {problem}")
        raise typer.Exit(2) from None
    if episode is not None:
        chosen = [t for t in trajectories if t.episode_id == episode]
        if not chosen:
            console.print(f"[red]error:[/] no episode {episode!r} in {file}")
            raise typer.Exit(2)
        trajectory = chosen[0]
    elif not 0 <= index < len(trajectories):
        console.print(f"[red]error:[/] --index {index} is outside 0-{len(trajectories) - 1}")
        raise typer.Exit(2)
    else:
        trajectory = trajectories[index]
    tokenizer = None
    if tokens:
        from transformers import AutoTokenizer

        from agenttrain.policy.models import resolve

        tokenizer = AutoTokenizer.from_pretrained(resolve(tokens).path)
    show_episode(trajectory, console, full=full, tokenizer=tokenizer)


@app.command()
def train(
    config: Annotated[Path, typer.Argument(help="YAML recipe, e.g. configs/textcraft_grpo.yaml.")],
    overrides: Annotated[
        list[str] | None,
        typer.Argument(
            help="Dotted overrides, e.g. algorithm.kl.coef=0.01 trainer.total_steps=50."
        ),
    ] = None,
    allow_config_change: AllowConfigChangeOption = False,
) -> None:
    """Train with GRPO (or RLOO, REINFORCE++): rollouts, updates, checkpoints, validation, report.

    Example: agenttrain train configs/textcraft_grpo.yaml trainer.total_steps=50
    """
    from agenttrain.config import load
    from agenttrain.rl.config import TrainConfig
    from agenttrain.rl.trainer import Trainer

    _run_trainer(
        lambda: Trainer(load(TrainConfig, config, overrides or []), console, allow_config_change)
    )


@app.command()
def launch(
    config: Annotated[
        Path | None, typer.Argument(help="Training YAML; its launch: section says what to start.")
    ] = None,
    overrides: Annotated[
        list[str] | None,
        typer.Argument(help="Dotted overrides, passed on to the training as well."),
    ] = None,
    status: Annotated[
        Path | None,
        typer.Option("--status", help="Show the processes of the launch of this run folder."),
    ] = None,
    stop: Annotated[
        Path | None,
        typer.Option("--stop", help="Stop the launch of this run folder (its processes only)."),
    ] = None,
) -> None:
    """Start the environment servers (and memory service) a config names, check they answer,
    train, and stop everything started when the training ends, fails or is interrupted.

    Example: agenttrain launch configs/textcraft_grpo.yaml 'launch.servers={textcraft: {count: 2}}'
    """
    from agenttrain.config import ConfigError
    from agenttrain.envs.registry import UnknownEnvironment
    from agenttrain.launcher.services import LaunchError
    from agenttrain.launcher.state import read_state, status_rows, stop_launch
    from agenttrain.launcher.supervisor import Launcher, LaunchFailed

    if (config is not None) + (status is not None) + (stop is not None) != 1:
        raise _refusal("give a CONFIG to launch, or one of --status RUN / --stop RUN")
    try:
        if status is not None:
            table = Table("process", "pid", "alive", "url", "answers", "restarts", box=box.SIMPLE)
            for row in status_rows(read_state(status)):
                table.add_row(*row)
            console.print(table)
            console.print(f"logs: {status / 'launch' / 'logs'}", highlight=False, soft_wrap=True)
            return
        if stop is not None:
            stopped = stop_launch(stop)
            console.print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")
            return
        assert config is not None
        launcher = Launcher(
            config, overrides or [], lambda text: console.print(text, markup=False, highlight=False)
        )
        code = launcher.run()
    except (ConfigError, LaunchError, UnknownEnvironment, FileNotFoundError) as problem:
        raise _refusal(problem) from None
    except LaunchFailed as failure:
        from rich.markup import escape

        console.print(f"[red]error:[/] {escape(str(failure))}", highlight=False, soft_wrap=True)
        raise typer.Exit(failure.exit_code) from None
    if code:
        raise typer.Exit(code)


@app.command()
def doctor(
    config: Annotated[
        Path | None, typer.Argument(help="Training YAML to check (default: the built-in one).")
    ] = None,
    overrides: Annotated[
        list[str] | None, typer.Argument(help="Dotted overrides, as for `agenttrain train`.")
    ] = None,
    server: ServerOption = None,
    env: Annotated[
        str | None,
        typer.Option(help="Environment the --server URLs serve (default: the config's only one)."),
    ] = None,
    verl: Annotated[
        bool, typer.Option(help="Also check verl, Ray, vLLM and the open-file limit Ray needs.")
    ] = False,
) -> None:
    """Check what a training run needs before it starts: servers (reachable, the right
    environment, the run's tasks), Java for SciWorld, the model, extras, disk and memory.

    Exit status: 0 every check passed (warnings allowed), 1 a check failed, 2 bad config.

    Example: agenttrain doctor configs/textcraft_grpo.yaml --server http://127.0.0.1:36001
    """
    from rich.markup import escape

    from agenttrain.config import ConfigError, load
    from agenttrain.doctor import diagnose, with_servers
    from agenttrain.rl.config import TrainConfig

    if config is not None and "=" in str(config) and not config.exists():
        overrides, config = [str(config), *(overrides or [])], None  # overrides, no config
    extra = [f"env.name={env}"] if env and config is None else []
    try:
        settings = load(TrainConfig, config, [*(overrides or []), *extra])
        if server:
            settings = with_servers(settings, server, env)
    except (ConfigError, ValueError) as problem:
        raise _refusal(problem) from None
    checks = diagnose(settings, verl=verl)
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("check", overflow="fold")
    table.add_column("status", no_wrap=True)
    table.add_column("found", overflow="fold")
    table.add_column("how to fix", overflow="fold")
    styles = {"ok": "[green]ok[/]", "warn": "[yellow]warn[/]", "fail": "[red]FAIL[/]"}
    for check in checks:
        cells = (escape(check.name), escape(check.detail), escape(check.fix))
        table.add_row(cells[0], styles[check.status], *cells[1:])
    console.print(table)
    failures = sum(check.status == "fail" for check in checks)
    if failures:
        console.print(f"[red]{failures} of {len(checks)} checks failed[/]")
        raise typer.Exit(1)
    console.print(f"[green]all {len(checks)} checks passed[/]")


def _set_up_errors() -> tuple[type[Exception], ...]:
    """What a training command reports in one line (exit 2) instead of a traceback."""
    from agenttrain.config import ConfigError
    from agenttrain.envs import EnvError, NotInProcess
    from agenttrain.envs.registry import DuplicateEnvironment, EnvKwargsError
    from agenttrain.envs.source import EnvSourceError
    from agenttrain.policy.base import PolicyError
    from agenttrain.rl.rewards import RewardFunctionError
    from agenttrain.run.checkpoint import CheckpointError
    from agenttrain.run.lock import RunFolderBusy
    from agenttrain.run.tracking import TrackerError
    from agenttrain.sft.data import DataError
    from agenttrain.sft.guard import HeldOutLeak

    return (
        ConfigError,
        CheckpointError,
        RunFolderBusy,
        DataError,
        HeldOutLeak,
        RewardFunctionError,
        TrackerError,
        PolicyError,
        EnvError,
        EnvSourceError,
        EnvKwargsError,
        DuplicateEnvironment,
        NotInProcess,
        KeyError,
    )


def _run_trainer(build: Callable[[], Any]) -> None:
    """Build a trainer (config and set-up errors exit 2), train; exit 3 when the run failed
    (e.g. too many environment errors), 130 when stopped by Ctrl-C, 143 by SIGTERM (after
    saving a checkpoint)."""
    from agenttrain.run.runtime import RunFailed

    try:
        trainer = build()
    except _set_up_errors() as problem:
        console.print(f"[red]error:[/] {problem}")
        raise typer.Exit(2) from None
    from agenttrain.run.checkpoint import CheckpointError
    from agenttrain.run.lock import RunFolderBusy

    try:
        trainer.train()
    except RunFailed as failure:
        console.print(f"[red]error:[/] {failure}", highlight=False)
        raise typer.Exit(failure.exit_code) from None
    except RunFolderBusy as busy:
        console.print(f"[red]error:[/] {busy}", highlight=False)
        raise typer.Exit(2) from None
    except CheckpointError as failure:  # e.g. a full disk while saving
        console.print(f"[red]error:[/] {failure}", highlight=False)
        raise typer.Exit(1) from None
    if trainer.stop_requested:
        raise typer.Exit(trainer.stop.exit_code)


@app.command()
def sft(
    config: Annotated[Path, typer.Argument(help="YAML recipe, e.g. configs/textcraft_sft.yaml.")],
    overrides: Annotated[
        list[str] | None,
        # Rich markup would read [...] as a style tag and drop it: \\[ shows a bracket.
        typer.Argument(help="Dotted overrides, e.g. optim.lr=1e-4 'data.train=\\[demos.jsonl]'."),
    ] = None,
    allow_config_change: AllowConfigChangeOption = False,
) -> None:
    """Supervised fine-tuning on multi-turn episodes (loss on the agent's turns only).

    Reads agenttrain trajectories (from `demos` or `eval`), AgentGym AgentTraj or chat JSONL;
    writes checkpoints that `agenttrain train model.path=...` continues from.

    Example: agenttrain sft configs/textcraft_sft.yaml 'data.train=\\[runs/demos/textcraft.jsonl]'
    """
    from agenttrain.config import load
    from agenttrain.sft.config import SFTConfig
    from agenttrain.sft.trainer import SFTTrainer

    _run_trainer(
        lambda: SFTTrainer(load(SFTConfig, config, overrides or []), console, allow_config_change)
    )


@app.command()
def demos(
    out: Annotated[Path, typer.Option(help="JSONL file to write (trajectory format).")],
    env: Annotated[str, typer.Option(help="Environment.")] = "textcraft",
    split: Annotated[str, typer.Option(help="Task split (never test).")] = "train",
    tasks: Annotated[
        str | None, typer.Option(help="Positions within the split, e.g. 0-149.")
    ] = None,
    solver: Annotated[
        str,
        typer.Option(help="oracle, or any model spec (checkpoint, openai:<model>, ...)."),
    ] = "oracle",
    n: Annotated[
        int, typer.Option("--samples", "-n", min=1, help="Attempts per task (model solvers).")
    ] = 1,
    temperature: Annotated[float, typer.Option(min=0, help="Model solvers: sampling.")] = 0.7,
    max_turns: Annotated[int | None, typer.Option(min=1, help="Default: the env's.")] = None,
    max_new_tokens: Annotated[int, typer.Option(min=1, help="Per model turn.")] = 256,
    action_format: Annotated[
        ActionFormat, typer.Option("--format", help="react (thought + action) or adapt, json, raw.")
    ] = "react",
    device: Annotated[str, typer.Option(help="cpu or cuda.")] = "cpu",
    seed: Annotated[int, typer.Option(help="Sampling seed.")] = 0,
) -> None:
    """Write successful episodes of a solver on training tasks, as SFT data.

    Example: agenttrain demos --env textcraft --split train --solver oracle --out demos.jsonl
    """
    from pydantic import ValidationError

    from agenttrain.envs.base import EnvError
    from agenttrain.eval.runner import EvalConfig
    from agenttrain.policy.base import PolicyError
    from agenttrain.rollout.engine import RolloutConfig
    from agenttrain.sft.demos import write_demos

    try:
        config = EvalConfig(
            env=env,
            split=split,
            tasks=_positions("--tasks", tasks),
            models=[solver],
            n=n,
            seeds=[seed],
            temperature=temperature,
            rollout=RolloutConfig(
                max_turns=max_turns, max_new_tokens=max_new_tokens, action_format=action_format
            ),
            device=device,
        )
        result = write_demos(config, out, console)
    except (ValidationError, ValueError, KeyError, PolicyError, EnvError) as problem:
        console.print(f"[red]error:[/] {problem}")
        raise typer.Exit(2) from None
    if result.not_kept:
        console.print(result.not_kept_line(), markup=False, highlight=False)
    console.print(
        f"kept {result.kept} of {result.episodes} episodes (successful ones), "
        f"{result.turns} turns -> {result.out}\n"
        f"Next: agenttrain sft configs/textcraft_sft.yaml 'data.train=[{result.out}]'",
        markup=False,
        soft_wrap=True,  # a command broken over lines cannot be copied
    )
    if result.kept == 0:
        raise typer.Exit(1)


@app.command()
def recipe(
    config: Annotated[
        Path, typer.Argument(help="YAML recipe, e.g. configs/textcraft_recipe.yaml.")
    ] = Path("configs/textcraft_recipe.yaml"),
    overrides: Annotated[
        list[str] | None,
        typer.Argument(
            help="Dotted overrides, e.g. eval.n=2 'grpo.overrides=\\[trainer.total_steps=4]'."
        ),
    ] = None,
) -> None:
    """Demonstrations -> SFT -> GRPO -> eval of base, SFT and SFT+GRPO on the same tasks.

    Finished stages are reused, so running the same command again continues a stopped recipe.

    Example: agenttrain recipe configs/textcraft_recipe.yaml
    """
    from agenttrain.recipe import Recipe, load_recipe
    from agenttrain.run.runtime import RunFailed

    try:
        plan = Recipe(load_recipe(config, overrides or []), console)
        report = plan.run()
    except (*_set_up_errors(), ValueError) as problem:
        console.print(f"[red]error:[/] {problem}")
        raise typer.Exit(2) from None
    except RunFailed as failure:
        console.print(f"[red]error:[/] {failure}", highlight=False)
        raise typer.Exit(failure.exit_code) from None
    except KeyboardInterrupt:
        console.print("[yellow]stopped; run the same command again to continue[/]")
        raise typer.Exit(130) from None
    console.print(f"[bold]Report:[/] {report}")


@app.command()
def export(
    source: Annotated[str, typer.Argument(help="A run folder, checkpoint folder or model spec.")],
    out: Annotated[Path, typer.Option(help="Folder to write (must be new or empty).")],
    merge_lora: Annotated[bool, typer.Option(help="Merge a LoRA adapter into its base.")] = False,
) -> None:
    """Write a standalone Hugging Face model folder from a run or checkpoint.

    Example: agenttrain export runs/textcraft-grpo --out models/textcraft --merge-lora
    """
    from agenttrain.policy.base import PolicyError
    from agenttrain.rl.export import export as export_model

    try:
        folder = export_model(source, out, merge_lora)
    except (PolicyError, ValueError) as problem:
        console.print(f"[red]error:[/] {problem}")
        raise typer.Exit(2) from None
    console.print(f"Exported {source} to {folder}")


# --- verl: data export, config mapping, launch (agenttrain.integrations.verl) ---------------

VerlOverrideOption = Annotated[
    list[str] | None,
    typer.Option(
        "--verl",
        help="An extra verl override applied after ours (repeat), e.g. "
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.6.",
    ),
]
DataDirOption = Annotated[
    Path | None,
    typer.Option(help="Folder of the parquet and agent-loop YAML. Default: <run.out_dir>/verl."),
]
GpusOption = Annotated[int, typer.Option("--gpus", min=1, help="GPUs per node.")]
NodesOption = Annotated[int, typer.Option("--nodes", min=1, help="Nodes of the Ray cluster.")]


def _refusal(problem: object) -> typer.Exit:
    """Print one unwrapped error line (messages hold brackets and install commands); the exit
    (status 2) to raise."""
    from rich.markup import escape

    console.print(f"[red]error:[/] {escape(str(problem))}", soft_wrap=True)
    return typer.Exit(2)


PromptLengthOption = Annotated[
    int | None,
    typer.Option(
        min=1,
        help="verl's prompt budget (instructions + first observation); the rest of "
        "rollout.max_context is the response budget. Default: min(1024, max_context/2).",
    ),
]


@app.command("data")
def data_command(
    env: Annotated[str, typer.Option(help="Environment (agenttrain envs lists them).")],
    out: Annotated[Path, typer.Option(help="Folder to write <env>_<split>.parquet|json into.")],
    split: Annotated[str, typer.Option(help="Task split, or 'all'.")] = "train",
    data_format: Annotated[
        str, typer.Option("--format", help="verl (parquet rows) or agentgym (id list JSON).")
    ] = "verl",
    tasks: Annotated[
        str | None, typer.Option(help="Positions within the split, e.g. 0-9,20.")
    ] = None,
    action_format: Annotated[str, typer.Option(help="react, adapt, json or raw.")] = "react",
    prompt_style: Annotated[
        str, typer.Option(help="agenttrain (bugs fixed) or agentgym (verbatim).")
    ] = "agenttrain",
    first_observation: Annotated[
        bool,
        typer.Option(
            help="End each verl prompt with the task's first observation (verl <= 0.7's "
            "interaction path; the agent loop adds it itself)."
        ),
    ] = False,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Write an environment's tasks as training data: verl parquet or AgentGym's id lists.

    Example: agenttrain data --env textcraft --split train --format verl --out data/verl
    """
    from agenttrain.envs.source import EnvSource
    from agenttrain.eval.runner import parse_ranges
    from agenttrain.integrations.verl.data import DataExportError, export_data

    if data_format not in ("verl", "agentgym"):
        raise _refusal(f"--format {data_format!r}: choose verl or agentgym") from None
    if prompt_style not in ("agenttrain", "agentgym"):
        raise _refusal(f"--prompt-style {prompt_style!r}: choose agenttrain or agentgym") from None
    if first_observation and data_format != "verl":
        raise _refusal("--first-observation applies to --format verl only") from None
    try:
        source = EnvSource(env, servers=server or (), token=token) if first_observation else None
        written = export_data(
            env,
            split,
            out,
            data_format,  # type: ignore[arg-type]
            positions=parse_ranges(tasks) if tasks else None,
            action_format=action_format,
            prompt_style=prompt_style,  # type: ignore[arg-type]
            first_observation_from=source,
        )
    except (DataExportError, *_set_up_errors(), ValueError) as problem:
        raise _refusal(problem) from None
    console.print(
        f"Wrote {written.rows} {env} tasks of the {split} split ({data_format}) -> {written.path}",
        markup=False,
        soft_wrap=True,
    )


@app.command("fewshot-pool")
def fewshot_pool(
    episodes: Annotated[
        list[Path],
        typer.Argument(help="Episode files (eval's <model>/episodes.jsonl, run trajectories)."),
    ],
    env: Annotated[str, typer.Option(help="Environment; only its train tasks may enter.")],
    out: Annotated[Path, typer.Option(help="Pool file to write (JSONL).")],
    quantile: Annotated[
        float, typer.Option(min=0, max=1, help="Keep decisions whose reward reaches it.")
    ] = 0.75,
) -> None:
    """Build a few-shot pool of good decisions from train-split episodes.

    Episodes of val/test tasks are refused, naming them. Use the pool with
    env.kwargs.fewshot_pool (econ).

    Example: agenttrain fewshot-pool runs/econ-train/oracle/episodes.jsonl --env econ
    --out pools/econ.jsonl
    """
    from agenttrain.agent.fewshot import FewshotError, build_pool, read_episodes, write_pool
    from agenttrain.envs import get_spec

    try:
        spec = get_spec(env)
        pool = build_pool(read_episodes(episodes), (spec.name,), spec.split("train"), quantile)
    except (FewshotError, KeyError) as problem:
        raise _refusal(problem) from None
    written = write_pool(out, pool)
    console.print(
        f"Wrote {written} decisions (reward >= the {quantile:g} quantile) -> {out}",
        markup=False,
        soft_wrap=True,
    )


verl_app = typer.Typer(
    help="Train a recipe on verl + Ray (the agenttrain[verl] extra): overrides and launch.",
    no_args_is_help=True,
)
app.add_typer(verl_app, name="verl")


def _verl_plan(
    config: Path,
    overrides: list[str] | None,
    data_dir: Path | None,
    gpus: int,
    nodes: int,
    prompt_length: int | None,
    extra: list[str] | None,
) -> Any:
    """The verl plan of a recipe; a bad config or an unmappable value exits 2."""
    from agenttrain.config import load
    from agenttrain.integrations.verl.launch import plan_run
    from agenttrain.rl.config import TrainConfig

    try:
        return plan_run(
            load(TrainConfig, config, overrides or []),
            data_dir=data_dir,
            n_gpus_per_node=gpus,
            nnodes=nodes,
            prompt_length=prompt_length,
            extra=extra or [],
        )
    except (*_set_up_errors(), ValueError) as problem:
        raise _refusal(problem) from None


def _write_verl_files(plan: Any, *, data: bool, only_missing: bool) -> None:
    from agenttrain.integrations.verl.data import DataExportError
    from agenttrain.integrations.verl.launch import write_data, write_loop_config

    console.print(f"agent loop settings -> {write_loop_config(plan)}", markup=False, soft_wrap=True)
    if not data:
        return
    try:
        written = write_data(plan, only_missing=only_missing)
    except (DataExportError, KeyError, ValueError) as problem:
        raise _refusal(problem) from None
    for item in written:
        console.print(
            f"{item.split} split: {item.rows} tasks -> {item.path}", markup=False, soft_wrap=True
        )


@verl_app.command("config")
def verl_config(
    config: Annotated[Path, typer.Argument(help="YAML recipe, e.g. configs/textcraft_grpo.yaml.")],
    overrides: Annotated[
        list[str] | None,
        typer.Argument(help="Dotted overrides of the recipe, e.g. data.group_size=8."),
    ] = None,
    data_dir: DataDirOption = None,
    gpus: GpusOption = 1,
    nodes: NodesOption = 1,
    prompt_length: PromptLengthOption = None,
    write_data: Annotated[
        bool, typer.Option(help="Also write the train and validation parquet.")
    ] = False,
    verl: VerlOverrideOption = None,
) -> None:
    """Print the verl overrides that reproduce a recipe, and the keys verl cannot follow.

    Writes the agent loop's YAML (and the data with --write-data) into --data-dir.

    Example: agenttrain verl config configs/textcraft_grpo.yaml --gpus 8 --write-data
    """
    import shlex

    plan = _verl_plan(config, overrides, data_dir, gpus, nodes, prompt_length, verl)
    for arg in plan.args():
        typer.echo(shlex.quote(arg))
    table = Table(title="agenttrain keys verl cannot follow")
    table.add_column("key", no_wrap=True)
    table.add_column("value", max_width=16)
    table.add_column("effect", no_wrap=True)
    table.add_column("why")
    for item in plan.overrides.unsupported:
        effect = "[yellow]differs[/]" if item.matters else "none"
        table.add_row(item.key, repr(item.value), effect, item.reason)
    console.print(table)
    for note in plan.overrides.notes:
        console.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
    _write_verl_files(plan, data=write_data, only_missing=False)


@verl_app.command("train")
def verl_train(
    config: Annotated[Path, typer.Argument(help="YAML recipe, e.g. configs/textcraft_grpo.yaml.")],
    overrides: Annotated[
        list[str] | None,
        typer.Argument(help="Dotted overrides of the recipe, e.g. data.group_size=8."),
    ] = None,
    data_dir: DataDirOption = None,
    gpus: GpusOption = 1,
    nodes: NodesOption = 1,
    prompt_length: PromptLengthOption = None,
    ray_address: Annotated[
        str | None, typer.Option(help="Ray cluster to join (RAY_ADDRESS); default: a local one.")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option(help="Print the command, write and run nothing.")
    ] = False,
    verl: VerlOverrideOption = None,
) -> None:
    """Run a recipe with verl's trainer (python -m verl.trainer.main_ppo) on a GPU cluster.

    Writes the agent loop's YAML and any missing parquet into --data-dir first.

    Example: agenttrain verl train configs/textcraft_grpo.yaml --gpus 8 --ray-address auto
    """
    import shlex

    from agenttrain.integrations.verl import VerlMissing, require_verl
    from agenttrain.integrations.verl.launch import run_main_ppo

    try:
        require_verl("agenttrain verl train")
    except VerlMissing as missing:
        raise _refusal(missing) from None
    plan = _verl_plan(config, overrides, data_dir, gpus, nodes, prompt_length, verl)
    prefix = f"RAY_ADDRESS={shlex.quote(ray_address)} " if ray_address else ""
    typer.echo(prefix + shlex.join(plan.command()))
    if dry_run:
        return
    _write_verl_files(plan, data=True, only_missing=True)
    raise typer.Exit(run_main_ppo(plan, ray_address))


memory_app = typer.Typer(
    help="The experience pool: serve it with ReMe's task-memory HTTP API.", no_args_is_help=True
)
app.add_typer(memory_app, name="memory")


@memory_app.command("serve")
def memory_serve(
    pool: Annotated[Path, typer.Option(help="The pool's SQLite file (created if missing).")] = Path(
        "runs/memory/pool.sqlite"
    ),
    host: Annotated[str, typer.Option(help="Interface to bind; 0.0.0.0 exposes it.")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(help="Port (AgentEvolver's ReMe: 8001); 0: a free one.")
    ] = 8001,
    retrieval: Annotated[
        Literal["auto", "embedding", "bm25"],
        typer.Option(help="embedding (the memory extra), bm25, or auto (embedding if installed)."),
    ] = "auto",
    summarizer: Annotated[
        str, typer.Option(help="rules, or openai:<model> (key from $OPENAI_API_KEY).")
    ] = "rules",
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "warning",
) -> None:
    """Serve an experience pool with ReMe's task-memory API (/summary_task_memory,
    /retrieve_task_memory, /retrieve_task_memory_simple, /health): AgentEvolver-style clients
    and `memory.url` runs use it unchanged.

    Example: agenttrain memory serve --port 8001 --pool runs/memory/pool.sqlite
    """
    from agenttrain.memory.embedding import EmbedderMissing, load_embedder
    from agenttrain.memory.pool import ExperiencePool
    from agenttrain.memory.server import serve_memory
    from agenttrain.memory.summarize import build_summarizer
    from agenttrain.serving.runner import PortInUse

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        chosen = build_summarizer(summarizer)
        store = ExperiencePool(pool.resolve(), load_embedder(retrieval))
        serve_memory(store, chosen, host=host, port=port, log_level=log_level)
    except (PortInUse, ValueError, EmbedderMissing) as problem:
        raise _refusal(problem) from None


def run_cli() -> None:
    """The `agenttrain` command. An operating-system error that no command handled (a path
    that is a file, a read-only or full disk, a permission) is one `error:` line, not a
    traceback."""
    import errno
    import sys

    try:
        app(prog_name="agenttrain")
    except OSError as problem:
        what = problem.strerror or str(problem)
        where = f": {problem.filename}" if problem.filename else ""
        hint = " (the disk is full)" if problem.errno == errno.ENOSPC else ""
        console.print(f"[red]error:[/] {what}{where}{hint}", highlight=False)
        sys.exit(1)
