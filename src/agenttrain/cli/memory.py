"""`agenttrain memory`: the experience pool behind ReMe's task-memory HTTP API."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Literal

import typer

from agenttrain.cli.options import HostOption, LogLevelOption
from agenttrain.cli.output import refusal

app = typer.Typer(
    help="The experience pool: serve it with ReMe's task-memory HTTP API.", no_args_is_help=True
)


@app.command("serve")
def memory_serve(
    pool: Annotated[Path, typer.Option(help="The pool's SQLite file (created if missing).")] = Path(
        "runs/memory/pool.sqlite"
    ),
    host: HostOption = "127.0.0.1",
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
    log_level: LogLevelOption = "warning",
    env: Annotated[
        str | None,
        typer.Option(
            help="Accept only this environment's training-split task ids (ReMe clients send "
            "no split; without it, only a 'split' label is checked)."
        ),
    ] = None,
) -> None:
    """Serve an experience pool with ReMe's task-memory API (/summary_task_memory,
    /retrieve_task_memory, /retrieve_task_memory_simple, /health): AgentEvolver-style clients
    and `memory.url` runs use it unchanged.

    Example: agenttrain memory serve --port 8001 --pool runs/memory/pool.sqlite --env textcraft
    """
    from agenttrain.memory.embedding import EmbedderMissing, load_embedder
    from agenttrain.memory.pool import ExperiencePool
    from agenttrain.memory.server import serve_memory
    from agenttrain.memory.summarize import build_summarizer
    from agenttrain.serving.runner import PortInUse

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        chosen = build_summarizer(summarizer)
        train_tasks = _train_task_ids(env) if env else None
        store = ExperiencePool(pool.resolve(), load_embedder(retrieval))
        serve_memory(
            store, chosen, host=host, port=port, log_level=log_level, train_tasks=train_tasks
        )
    except (PortInUse, ValueError, KeyError, EmbedderMissing) as problem:
        raise refusal(problem) from None


def _train_task_ids(env: str) -> set[str]:
    """The task ids of the environment's training split, as clients send them (strings)."""
    from agenttrain.envs import get_spec
    from agenttrain.memory.experience import TRAIN_SPLIT

    return {str(task_id) for task_id in get_spec(env).split(TRAIN_SPLIT)}
