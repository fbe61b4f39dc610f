"""Training data for verl (one parquet row per task) and AgentGym's id lists, for any
registered environment and split.

A verl row holds the conversation start (our environment's instructions in the chosen action
format), not the first observation: the agent loop resets the environment to the row's task
and adds it. Only verl <= 0.7's interaction path needs the first observation in the prompt
(`first_observation`), since an interaction speaks only after the model's first reply. The
row's keys are uniform across rows, because parquet turns dicts into structs and a key missing
from one row would come back as None (pandas issue 53798).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from agenttrain.agent.conversation import PromptStyle, conversation_start
from agenttrain.agent.formats import get_format
from agenttrain.envs import get_spec
from agenttrain.envs.source import EnvSource
from agenttrain.eval.runner import select_tasks
from agenttrain.integrations.verl import INSTALL_HINT
from agenttrain.integrations.verl.settings import AGENT_NAME

DataFormat = Literal["verl", "agentgym"]


class DataExportError(ValueError):
    """The data cannot be written (a missing dependency, an empty selection)."""


@dataclass(frozen=True)
class ExportedData:
    path: Path
    env: str
    split: str
    rows: int


def data_file(out_dir: Path, env: str, split: str, data_format: DataFormat) -> Path:
    """`<env>_<split>.parquet` (verl) or `<env>_<split>.json` (AgentGym's AgentItemId naming)."""
    suffix = ".parquet" if data_format == "verl" else ".json"
    return out_dir / f"{env}_{split}{suffix}"


async def first_observations(source: EnvSource, task_ids: Sequence[int]) -> list[str]:
    """Each task's first observation, read by resetting an environment to it."""
    texts = []
    async with source:
        for task_id in task_ids:
            env = source.environment()
            try:
                texts.append((await env.reset(task_id)).text)
            finally:
                await env.close()
    return texts


def verl_rows(
    env: str,
    split: str,
    task_ids: Sequence[int],
    *,
    action_format: str = "react",
    prompt_style: PromptStyle = "agenttrain",
    system_prompt: str | None = None,
    observations: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """One verl row per task; the agent loop reads `extra_info.env` and `extra_info.task_id`.
    `observations` (one per task) end the prompts, for verl <= 0.7's interaction path."""
    spec = get_spec(env)
    start = conversation_start(spec, get_format(action_format, spec), prompt_style)
    if system_prompt is not None:
        start = [{"role": "system", "content": system_prompt}, *start]
    firsts = [[{"role": "user", "content": text}] for text in observations or ()]
    return [
        {
            "data_source": f"agenttrain/{spec.name}",
            "prompt": start + (firsts[index] if firsts else []),
            "ability": f"agent/{spec.name}",
            "reward_model": {"style": "env", "ground_truth": str(task_id)},
            "extra_info": {
                "index": index,
                "env": spec.name,
                "task_id": task_id,
                "split": split,
                "interaction_kwargs": {"name": AGENT_NAME, "env": spec.name, "task_id": task_id},
            },
            "agent_name": AGENT_NAME,
            "index": index,
        }
        for index, task_id in enumerate(task_ids)
    ]


def agentgym_items(env: str, task_ids: Sequence[int]) -> list[dict[str, str]]:
    """AgentGym's id list entries, `{"item_id": "<env>_<id>"}`: its trainers and AgentGym-RL
    pass the trailing integer to the server's reset."""
    return [{"item_id": f"{env}_{task_id}"} for task_id in task_ids]


def parquet_modules() -> tuple[Any, Any]:
    """pyarrow and pyarrow.parquet, or the install command (checked before any work)."""
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise DataExportError(
            f"writing verl parquet needs pyarrow, which is not installed: {INSTALL_HINT} "
            "(or pip install 'pyarrow>=19')"
        ) from None
    return pyarrow, pyarrow.parquet


def export_data(
    env: str,
    split: str,
    out_dir: Path,
    data_format: DataFormat = "verl",
    *,
    positions: Sequence[int] | None = None,
    action_format: str = "react",
    prompt_style: PromptStyle = "agenttrain",
    system_prompt: str | None = None,
    first_observation_from: EnvSource | None = None,
) -> ExportedData:
    """Write the tasks of `split` (those at `positions` only, if given) in `data_format`;
    verl prompts end with each task's first observation if `first_observation_from` is given."""
    task_ids = select_tasks(env, split, positions)
    if not task_ids:
        raise DataExportError(f"{env} split {split!r} selects no tasks")
    path = data_file(out_dir, env, split, data_format)
    if data_format == "verl":
        pyarrow, parquet = parquet_modules()
        observations = None
        if first_observation_from is not None:
            observations = asyncio.run(first_observations(first_observation_from, task_ids))
        rows = verl_rows(
            env,
            split,
            task_ids,
            action_format=action_format,
            prompt_style=prompt_style,
            system_prompt=system_prompt,
            observations=observations,
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        parquet.write_table(pyarrow.Table.from_pylist(rows), path)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(agentgym_items(env, task_ids), indent=1) + "\n")
    return ExportedData(path=path, env=env, split=split, rows=len(task_ids))
