"""Evaluation: evaluate models on the same tasks, compare evaluations, show one episode."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agenttrain.cli.eval_options import (
    BackendOption,
    DraftTokensOption,
    DtypeOption,
    EnvOption,
    EvalOutOption,
    FormatOption,
    MaxContextOption,
    MaxEnvErrorRateOption,
    MaxNewTokensOption,
    MaxTurnsOption,
    ModelsOption,
    OpenaiBaseUrlOption,
    PromptStyleOption,
    ReplaceOption,
    SamplesOption,
    SeedsOption,
    TasksOption,
    TemperatureOption,
    TopPOption,
    WorkersOption,
)
from agenttrain.cli.options import (
    ConcurrencyOption,
    DeviceOption,
    ServerOption,
    SplitOption,
    TokenOption,
    usage_errors,
)
from agenttrain.cli.output import console, failure, refusal

if TYPE_CHECKING:
    from agenttrain.eval.runner import EvalConfig, ModelResult


def eval_command(
    ctx: typer.Context,
    model: ModelsOption = None,
    env: EnvOption = None,
    split: SplitOption = "test",
    tasks: TasksOption = None,
    n: SamplesOption = 1,
    seeds: SeedsOption = "0",
    temperature: TemperatureOption = 0.7,
    top_p: TopPOption = 1.0,
    max_turns: MaxTurnsOption = None,
    max_new_tokens: MaxNewTokensOption = None,
    max_context: MaxContextOption = None,
    action_format: FormatOption = None,
    prompt_style: PromptStyleOption = None,
    backend: BackendOption = "hf",
    device: DeviceOption = "cpu",
    dtype: DtypeOption = "auto",
    draft_tokens: DraftTokensOption = None,
    concurrency: ConcurrencyOption = 32,
    workers: WorkersOption = 1,
    server: ServerOption = None,
    token: TokenOption = None,
    openai_base_url: OpenaiBaseUrlOption = None,
    max_env_error_rate: MaxEnvErrorRateOption = 0.05,
    out: EvalOutOption = None,
    replace: ReplaceOption = False,
) -> None:
    """Evaluate one or more models on the same tasks and seeds: success, pass@k, avg@k, report.

    Episodes are kept as they end: after Ctrl-C (or SIGTERM) the same command with the same
    --out plays only the missing ones.

    A checkpoint recorded how its model was trained to act (environment, action format,
    token and turn limits, system prompt); those are the defaults of the matching flags.

    Exit status: 0 done, 2 bad options, 3 too many environment errors (--max-env-error-rate).

    Example: agenttrain eval --env textcraft --split test --tasks 0-29 --model smollm2-135m -n 4
    """
    from agenttrain.eval.runner import EvalStopped, evaluate

    try:
        config = _eval_config(ctx.params)  # every flag above, by name
        results = evaluate(config, console)
    except usage_errors() as problem:
        raise failure(problem, highlight=False) from None
    except EvalStopped as stopped:
        again = "" if out else f" (add --out {config.out})"
        console.print(f"[yellow]{stopped}{again}[/]", highlight=False)
        raise typer.Exit(stopped.exit_code) from None
    _print_evaluation(config, results)


def _eval_config(flags: Mapping[str, Any]) -> EvalConfig:
    """The evaluation `eval`'s flags ask for. A setting no flag gives is the one the checkpoints
    recorded (said in one line), else the environment's own action format, else the default."""
    import time

    from agenttrain.cli.options import positions
    from agenttrain.eval.runner import (
        SETTING_FLAGS,
        EvalConfig,
        builtin_settings,
        describe_settings,
        recorded_settings,
    )
    from agenttrain.rollout.engine import RolloutConfig

    models = flags["model"] or ["smollm2-135m"]
    given = {key: flags[key] for key in SETTING_FLAGS if key in flags}
    recorded = recorded_settings(models, given)
    settings = {
        **builtin_settings(),
        **recorded,
        **{key: value for key, value in given.items() if value is not None},
    }
    if flags["action_format"] is None and "action_format" not in recorded:
        settings["action_format"] = _spec_format(settings["env"], settings["action_format"])
    if recorded:
        console.print(
            f"as the checkpoint was trained: {describe_settings(recorded)}", highlight=False
        )
    return EvalConfig(
        env=settings.pop("env"),
        split=flags["split"],
        tasks=positions("--tasks", flags["tasks"]),
        models=models,
        backend=flags["backend"],
        n=flags["n"],
        seeds=positions("--seeds", flags["seeds"]),
        temperature=flags["temperature"],
        top_p=flags["top_p"],
        rollout=RolloutConfig(**settings, max_in_flight=flags["concurrency"]),
        servers=flags["server"] or [],
        token=flags["token"],
        device=flags["device"],
        inference_dtype=flags["dtype"],
        draft_tokens=flags["draft_tokens"],
        workers=flags["workers"],
        openai_base_url=flags["openai_base_url"],
        max_env_error_rate=flags["max_env_error_rate"],
        out=flags["out"] or Path("runs") / time.strftime("eval-%Y%m%d-%H%M%S"),
        replace=flags["replace"],
    )


def _spec_format(env: str, fallback: str) -> str:
    """The environment's own action format (econ, largest: raw JSON/answers), so its format rule
    applies without `--format`; `fallback` for an unknown name (reported later, with choices)."""
    from agenttrain.envs import get_spec

    try:
        own = get_spec(env).action_format
    except (KeyError, ValueError):
        return fallback
    return own if own in ("react", "adapt", "json", "raw") else fallback


def _print_evaluation(config: EvalConfig, results: list[ModelResult]) -> None:
    """Write the report, print the tables and errors; exit 3 where a model lost too many
    episodes to errors."""
    import sys

    from agenttrain.cli.eval_tables import (
        DIFFERENCE_NOTE,
        INTERVAL_NOTE,
        SUMMARY_NOTE,
        intervals_table,
        summary_table,
    )
    from agenttrain.envs import get_spec
    from agenttrain.eval.report import env_error_lines, write_report
    from agenttrain.eval.runner import ENV_ERROR_EXIT_CODE, over_env_error_limit

    command = "agenttrain " + " ".join(sys.argv[1:])
    report = write_report(config.out, results, config, command, get_spec(config.env).breakdown_key)
    console.print(summary_table(results))
    console.print(SUMMARY_NOTE, highlight=False)
    console.print(intervals_table(results))
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


def compare(
    runs: Annotated[
        list[Path],
        typer.Argument(
            help="Evaluations: `agenttrain eval` output folders (every model in each), one "
            "model's folder, or episodes.jsonl files. The first run is the baseline. Join "
            "evaluations of one model each with + to pool them into one run (seeds of one arm).",
            show_default=False,
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(help="Folder for compare.md and compare.png (default runs/compare-<time>)."),
    ] = None,
    by: Annotated[
        str | None,
        typer.Option(
            metavar="<attrs>",
            help="Task attributes to break success down by, comma-separated (TextCraft: "
            "depth, ingredients, goal); default: the environment's (TextCraft: depth).",
        ),
    ] = None,
) -> None:
    """Compare evaluations: success with 95% intervals, reward, parse rate, format errors,
    turns, env errors, and each run minus the first over the tasks both played; success by
    the environment's breakdown key (TextCraft: depth) or by `--by`, paired within each
    group; how episodes
    failed (the first refused action's kind, TextCraft: made-up recipe, missing ingredients,
    ...; and how many resent a refused action). Where actions are JSON objects: JSON parse
    rate, share of -1 rewards, and each numeric field's distribution (mean, std, quantiles,
    plot, Kolmogorov-Smirnov test against the first).

    Exit status: 0 done, 2 an argument is not an evaluation or shares no task with the first.

    Example: agenttrain compare runs/eval-base runs/eval-trained --out runs/compare

    Seeds pooled: agenttrain compare runs/eval-sft runs/eval-s0+runs/eval-s1+runs/eval-s2

    By two attributes: agenttrain compare runs/eval-sft runs/eval-grpo --by depth,ingredients
    """
    import sys
    import time

    from agenttrain.eval.breakdown import breakdown_table, legend
    from agenttrain.eval.compare import (
        TERMINAL_NOTE,
        CompareError,
        decision_tables,
        differences_table,
        runs_table,
        write_markdown,
    )
    from agenttrain.eval.compare import compare as compare_runs
    from agenttrain.eval.failures import failures_table

    try:
        comparison = compare_runs(runs, by)
    except CompareError as problem:
        raise refusal(problem) from None
    folder = out or Path("runs") / time.strftime("compare-%Y%m%d-%H%M%S")
    report = write_markdown(comparison, folder, "agenttrain " + " ".join(sys.argv[1:]))
    console.print(runs_table(comparison))
    console.print(differences_table(comparison))
    console.print(TERMINAL_NOTE, highlight=False, markup=False)
    if comparison.breakdown is not None:
        console.print(breakdown_table(comparison.breakdown))
        console.print(legend(comparison.breakdown), soft_wrap=True, highlight=False)
    if comparison.failures is not None:
        console.print(failures_table(comparison.failures))
    for table in decision_tables(comparison.decisions) if comparison.decisions else []:
        console.print(table)
    console.print(f"Report: {report}", soft_wrap=True)


def show(
    file: Annotated[Path, typer.Argument(help="A trajectories JSONL file (e.g. episodes.jsonl).")],
    index: Annotated[int, typer.Option(help="Which episode (0-based line number).")] = 0,
    episode: Annotated[str | None, typer.Option(help="Pick by episode id instead.")] = None,
    full: Annotated[
        bool, typer.Option("--full", help="Show the whole conversation start.")
    ] = False,
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
        raise failure(f"no such file: {file}")
    try:
        trajectories = list(read_jsonl(file))
    except ValueError as problem:
        raise failure(problem) from None
    if episode is not None:
        chosen = [t for t in trajectories if t.episode_id == episode]
        if not chosen:
            raise failure(f"no episode {episode!r} in {file}")
        trajectory = chosen[0]
    elif not 0 <= index < len(trajectories):
        raise failure(f"--index {index} is outside 0-{len(trajectories) - 1}")
    else:
        trajectory = trajectories[index]
    tokenizer = None
    if tokens:
        from transformers import AutoTokenizer

        from agenttrain.policy.models import resolve

        tokenizer = AutoTokenizer.from_pretrained(resolve(tokens).path)
    show_episode(trajectory, console, full=full, tokenizer=tokenizer)
