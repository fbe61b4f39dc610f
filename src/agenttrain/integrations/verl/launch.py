"""Our recipe run by verl: the files `python -m verl.trainer.main_ppo` reads (the data parquet,
the agent loop's YAML) and the command itself (`agenttrain verl config` / `verl train`)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from agenttrain.integrations.verl.data import ExportedData, data_file, export_data
from agenttrain.integrations.verl.overrides import Overrides, verl_overrides
from agenttrain.integrations.verl.settings import loop_entry
from agenttrain.rl.config import EnvConfig, TrainConfig

LOOP_FILE = "agent_loop.yaml"
"""The agent loop's entry for verl (`agent_loop_config_path`), written next to the data."""


@dataclass(frozen=True)
class VerlPlan:
    """One verl run of a recipe: where its files go and the overrides that point at them."""

    config: TrainConfig
    data_dir: Path
    overrides: Overrides
    extra: tuple[str, ...] = ()
    """verl overrides of the user's own, applied after ours (e.g. GPU memory settings)."""

    @property
    def train_files(self) -> list[Path]:
        """One parquet per environment of the run (verl concatenates them)."""
        return [data_file(self.data_dir, e.name, e.split, "verl") for e in self.environments]

    @property
    def val_files(self) -> list[Path]:
        return [data_file(self.data_dir, e.name, e.val_split, "verl") for e in self.environments]

    @property
    def environments(self) -> list[EnvConfig]:
        return self.config.environments

    @property
    def loop_file(self) -> Path:
        return self.data_dir / LOOP_FILE

    def args(self) -> list[str]:
        return [*self.overrides.args, *self.extra]

    def command(self) -> list[str]:
        """`python -m verl.trainer.main_ppo` with every override, in this interpreter."""
        return [sys.executable, "-m", "verl.trainer.main_ppo", *self.args()]


def plan_run(
    config: TrainConfig,
    *,
    data_dir: Path | None = None,
    n_gpus_per_node: int = 1,
    nnodes: int = 1,
    prompt_length: int | None = None,
    extra: Sequence[str] = (),
) -> VerlPlan:
    """The run's plan; data and the loop YAML go to `data_dir` (default `<run.out_dir>/verl`)."""
    folder = (data_dir or config.run.out_dir / "verl").resolve()
    entries = config.environments
    overrides = verl_overrides(
        config,
        train_files=[data_file(folder, e.name, e.split, "verl") for e in entries],
        val_files=[data_file(folder, e.name, e.val_split, "verl") for e in entries],
        loop_config_path=folder / LOOP_FILE,
        n_gpus_per_node=n_gpus_per_node,
        nnodes=nnodes,
        prompt_length=prompt_length,
    )
    return VerlPlan(config=config, data_dir=folder, overrides=overrides, extra=tuple(extra))


def write_loop_config(plan: VerlPlan) -> Path:
    """The agent loop's YAML; private to the user when it holds the servers' token."""
    path = plan.loop_file
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump([loop_entry(plan.overrides.loop)], sort_keys=False))
    if plan.overrides.loop.token:
        path.chmod(0o600)
    return path


def write_data(plan: VerlPlan, *, only_missing: bool = False) -> list[ExportedData]:
    """The train and validation parquet of every environment, with the recipe's prompt
    settings (the action format the agent loop parses)."""
    rollout = plan.config.rollout
    written = []
    for entry in plan.environments:
        for split in (entry.split, entry.val_split):
            if only_missing and data_file(plan.data_dir, entry.name, split, "verl").exists():
                continue
            exported = export_data(
                entry.name,
                split,
                plan.data_dir,
                "verl",
                action_format=plan.overrides.loop.action_format,
                prompt_style=rollout.prompt_style,
                system_prompt=rollout.system_prompt,
            )
            written.append(exported)
    return written


def run_main_ppo(plan: VerlPlan, ray_address: str | None = None) -> int:
    """Run verl's trainer on the Ray cluster at `ray_address` (else a local one): its exit code."""
    env = dict(os.environ)
    if ray_address:
        env["RAY_ADDRESS"] = ray_address
    return subprocess.run(plan.command(), env=env, check=False).returncode
