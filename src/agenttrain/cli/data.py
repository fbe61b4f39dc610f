"""Training data: an environment's tasks for verl or AgentGym, a solver's demonstrations for
SFT, and a few-shot pool of good decisions."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from agenttrain.cli.options import (
    ActionFormat,
    DeviceOption,
    RecoveryFrom,
    RecoveryStyle,
    ServerOption,
    SplitOption,
    TokenOption,
    positions,
    usage_errors,
)
from agenttrain.cli.output import console, failure, refusal


def data_command(
    env: Annotated[str, typer.Option(help="Environment (agenttrain envs lists them).")],
    out: Annotated[Path, typer.Option(help="Folder to write <env>_<split>.parquet|json into.")],
    split: SplitOption = "train",
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
            "--first-observation",
            help="End each verl prompt with the task's first observation (verl <= 0.7's "
            "interaction path; the agent loop adds it itself).",
        ),
    ] = False,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Write an environment's tasks as training data: verl parquet or AgentGym's id lists.

    Example: agenttrain data --env textcraft --split train --format verl --out data/verl
    """
    from agenttrain.cli.run import set_up_errors
    from agenttrain.envs.source import EnvSource
    from agenttrain.eval.runner import parse_ranges
    from agenttrain.integrations.verl.data import DataExportError, export_data

    if data_format not in ("verl", "agentgym"):
        raise refusal(f"--format {data_format!r}: choose verl or agentgym") from None
    if prompt_style not in ("agenttrain", "agentgym"):
        raise refusal(f"--prompt-style {prompt_style!r}: choose agenttrain or agentgym") from None
    if first_observation and data_format != "verl":
        raise refusal("--first-observation applies to --format verl only") from None
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
    except (DataExportError, *set_up_errors(), ValueError) as problem:
        raise refusal(problem) from None
    console.print(
        f"Wrote {written.rows} {env} tasks of the {split} split ({data_format}) -> {written.path}",
        markup=False,
        soft_wrap=True,
    )


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
    device: DeviceOption = "cpu",
    seed: Annotated[int, typer.Option(help="Sampling seed.")] = 0,
    recovery: Annotated[
        float,
        typer.Option(
            min=0,
            max=1,
            help="Share of demonstrations rewritten with one refused action (no loss) and its "
            "recovery (textcraft).",
        ),
    ] = 0.0,
    recovery_style: Annotated[
        RecoveryStyle,
        typer.Option(
            help="plain: get the ingredient at once; inventory: check the inventory first, "
            "then name what it lacks.",
        ),
    ] = "plain",
    recovery_from: Annotated[
        RecoveryFrom,
        typer.Option(
            help="The refused action: craft (before its ingredients), get (of an item that must "
            "be crafted) or both (one of them per rewritten demonstration).",
        ),
    ] = "craft",
    quote_recipes: Annotated[
        bool,
        typer.Option(
            "--quote-recipes",
            help="Thoughts quote the listed recipe the first time they work toward an item, "
            "the goal's first (textcraft).",
        ),
    ] = False,
    quote_ingredients: Annotated[
        bool,
        typer.Option(
            "--quote-ingredients",
            help="With --quote-recipes: each quote is followed by which of its ingredients "
            "must be crafted first.",
        ),
    ] = False,
    still_needed: Annotated[
        bool,
        typer.Option(
            "--still-needed",
            help="Each get and craft thought ends with what the item it works toward still "
            "needs ('Still needed for beacon: 5 glass, 3 obsidian.') (textcraft).",
        ),
    ] = False,
    todo: Annotated[
        bool,
        typer.Option(
            "--todo",
            help="Replies fetch every ingredient with get before they know it is crafted, "
            "quote a recipe only when the game refuses, and carry what is left ('To do: get "
            "5 glass, craft beacon.') (textcraft; alone, not with the other rewrites).",
        ),
    ] = False,
) -> None:
    """Write successful episodes of a solver on training tasks, as SFT data.

    Example: agenttrain demos --env textcraft --split train --solver oracle --out demos.jsonl
    """
    from agenttrain.eval.runner import EvalConfig
    from agenttrain.rollout.engine import RolloutConfig
    from agenttrain.sft.demos import (
        add_needs,
        add_quotes,
        add_recovery,
        add_todo,
        check_ingredients,
        check_quotes,
        check_recovery,
        check_todo,
        other_rewrites,
        write_demos,
    )

    try:
        if recovery:
            check_recovery(env, recovery_style, action_format, recovery_from)
        if quote_recipes:
            check_quotes(env, action_format)
        if quote_ingredients:
            check_ingredients(quote_recipes)
        if still_needed:
            check_quotes(env, action_format, "--still-needed")
        if todo:
            others = other_rewrites(recovery_from, recovery_style, quote_recipes, still_needed)
            check_todo(env, action_format, others)
        config = EvalConfig(
            env=env,
            split=split,
            tasks=positions("--tasks", tasks),
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
        planned = 0
        if todo:
            planned, recovered = add_todo(out, env, action_format, recovery, seed)
        else:
            recovered = add_recovery(out, env, recovery, seed, recovery_style, recovery_from)
        quoted = add_quotes(out, env, action_format, quote_ingredients) if quote_recipes else 0
        tracked = add_needs(out, env, action_format) if still_needed else 0
    except usage_errors() as problem:
        raise failure(problem) from None
    if result.not_kept:
        console.print(result.not_kept_line(), markup=False, highlight=False)
    if recovery:
        from agenttrain.envs.textcraft.recovery import REFUSED

        what = REFUSED[recovery_from]
        console.print(f"{recovered} of {result.kept} rewritten to recover from {what}")
    if quote_recipes:
        kinds = " and the kinds of their ingredients" if quote_ingredients else ""
        console.print(f"{quoted} with thoughts that quote the recipes they follow{kinds}")
    if still_needed:
        console.print(f"{tracked} with thoughts that say what each item still needs")
    if todo:
        console.print(f"{planned} of {result.kept} rewritten to probe with get and carry a to-do")
    console.print(
        f"kept {result.kept} of {result.episodes} episodes (successful ones), "
        f"{result.turns} turns -> {result.out}\n"
        f"Next: agenttrain sft configs/textcraft_sft.yaml 'data.train=[{result.out}]'",
        markup=False,
        soft_wrap=True,  # a command broken over lines cannot be copied
    )
    if result.kept == 0:
        raise typer.Exit(1)


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
        raise refusal(problem) from None
    written = write_pool(out, pool)
    console.print(
        f"Wrote {written} decisions (reward >= the {quantile:g} quantile) -> {out}",
        markup=False,
        soft_wrap=True,
    )
