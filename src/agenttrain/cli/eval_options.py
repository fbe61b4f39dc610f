"""The flags of `agenttrain eval`, declared apart from the command so that it reads in one
screen."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from agenttrain.cli.options import ActionFormat

ModelsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--model",
        "-m",
        help="Model spec (repeat to compare): smollm2-135m, a model "
        "or checkpoint folder, a run folder (its last checkpoint), a run's checkpoints/ "
        "folder (each checkpoint), openai:<model>, oracle.",
    ),
]
EnvOption = Annotated[
    str | None, typer.Option(help="Environment. Default: the checkpoint's, else textcraft.")
]
TasksOption = Annotated[str | None, typer.Option(help="Positions within the split, e.g. 0-29,40.")]
SamplesOption = Annotated[
    int, typer.Option("--samples", "-n", min=1, help="Samples per task and seed.")
]
SeedsOption = Annotated[str, typer.Option(help="Comma-separated sampling seeds, e.g. 0,1.")]
TemperatureOption = Annotated[float, typer.Option(min=0, help="0 = greedy.")]
TopPOption = Annotated[float, typer.Option(min=0.01, max=1)]
MaxTurnsOption = Annotated[
    int | None, typer.Option(min=1, help="Default: the checkpoint's, else the env's.")
]
MaxNewTokensOption = Annotated[
    int | None, typer.Option(min=1, help="Per model turn. Default: the checkpoint's, else 256.")
]
MaxContextOption = Annotated[
    int | None,
    typer.Option(min=64, help="Tokens per episode. Default: the checkpoint's, else 4096."),
]
FormatOption = Annotated[
    ActionFormat | None, typer.Option("--format", help="Default: the checkpoint's, else react.")
]
PromptStyleOption = Annotated[
    Literal["agenttrain", "agentgym"] | None,
    typer.Option(help="agenttrain (bugs fixed) or agentgym (verbatim). Default: agenttrain."),
]
BackendOption = Annotated[Literal["hf", "vllm", "openai"], typer.Option()]
DtypeOption = Annotated[
    Literal["auto", "float32", "bfloat16"], typer.Option(help="Generation precision.")
]
DraftTokensOption = Annotated[
    int | None,
    typer.Option(
        min=0,
        help="Tokens guessed from each reply's own context and checked per decode step "
        "(sampled tokens distributed as without; 0 = off). Default: 6 on CPU, 0 on a GPU.",
    ),
]
WorkersOption = Annotated[
    int,
    typer.Option(
        min=1,
        help="Processes playing each model's episodes, each with its share of the CPU's "
        "threads and --concurrency episodes in flight (CPU only; on 2 cores, 2 workers "
        "generate ~2x the tokens of 1).",
    ),
]
OpenaiBaseUrlOption = Annotated[str | None, typer.Option(envvar="OPENAI_BASE_URL")]
MaxEnvErrorRateOption = Annotated[
    float,
    typer.Option(
        min=0,
        max=1,
        help="Exit with status 3 (after writing every file) if a model lost a larger "
        "share of its episodes to environment errors.",
    ),
]
EvalOutOption = Annotated[
    Path | None,
    typer.Option(
        help="Output folder (default runs/eval-<time>). An evaluation stopped there "
        "continues with the episodes it lacks."
    ),
]
ReplaceOption = Annotated[
    bool,
    typer.Option(
        "--replace", help="Discard an evaluation of a model in --out made with other settings."
    ),
]
