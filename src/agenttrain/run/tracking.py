"""Metric loggers: JSONL (always kept in the run folder), TensorBoard, W&B and MLflow.

W&B and MLflow are optional extras, imported only when named in `trainer.loggers`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def device_memory(device: Any) -> dict[str, float]:
    """Peak accelerator memory so far, in GiB, under verl's metric names (`perf/max_memory_*`),
    so that a step's fit on a card is read from the metrics; {} on the CPU."""
    import torch

    device = torch.device(device)
    if device.type != "cuda":
        return {}
    return {
        "perf/max_memory_allocated_gb": torch.cuda.max_memory_allocated(device) / 2**30,
        "perf/max_memory_reserved_gb": torch.cuda.max_memory_reserved(device) / 2**30,
    }


class TrackerError(RuntimeError):
    pass


class Tracker:
    def __init__(
        self,
        names: Sequence[str],
        run_dir: Path,
        run_name: str,
        config: Mapping[str, Any],
        resume_step: int = 0,
    ) -> None:
        self.metrics_path = run_dir / "metrics.jsonl"
        self._truncate(resume_step)
        self._tensorboard = self._wandb = self._mlflow = None
        if "tensorboard" in names:
            from torch.utils.tensorboard import SummaryWriter

            self._tensorboard = SummaryWriter(
                str(run_dir / "tensorboard"), purge_step=resume_step + 1
            )
        if "wandb" in names:
            try:
                import wandb
            except ImportError as missing:
                raise TrackerError("trainer.loggers has wandb: pip install wandb") from missing
            self._wandb = wandb.init(
                project="agenttrain",
                name=run_name,
                config=dict(config),
                dir=str(run_dir),
                resume="allow",
            )
        if "mlflow" in names:
            try:
                import mlflow
            except ImportError as missing:
                raise TrackerError("trainer.loggers has mlflow: pip install mlflow") from missing
            self._mlflow = mlflow
            mlflow.start_run(run_name=run_name)
            mlflow.log_params(_flatten(config))

    def _truncate(self, resume_step: int) -> None:
        """A resumed run rewrites what came after its checkpoint: no duplicate steps. A run
        without a checkpoint starts over (a first attempt that failed before its first save
        left a step-0 row that the rerun would log again)."""
        if not self.metrics_path.exists():
            return
        kept = [
            line
            for line in self.metrics_path.read_text().splitlines()
            if line.strip() and resume_step > 0 and json.loads(line)["step"] <= resume_step
        ]
        self.metrics_path.write_text("".join(line + "\n" for line in kept))

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        numeric = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}
        with self.metrics_path.open("a") as handle:
            handle.write(json.dumps({"step": step, **numeric}) + "\n")
        if self._tensorboard is not None:
            for key, value in numeric.items():
                self._tensorboard.add_scalar(key, value, step)
            self._tensorboard.flush()
        if self._wandb is not None:
            self._wandb.log(numeric, step=step)
        if self._mlflow is not None:
            self._mlflow.log_metrics({_mlflow_key(k): v for k, v in numeric.items()}, step=step)

    def close(self) -> None:
        if self._tensorboard is not None:
            self._tensorboard.close()
        if self._wandb is not None:
            self._wandb.finish()
        if self._mlflow is not None:
            self._mlflow.end_run()


def read_metrics(path: Path) -> list[dict[str, float]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    flat: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}.{key}" if prefix else key
        if isinstance(value, Mapping):
            flat.update(_flatten(value, name))
        else:
            flat[name] = str(value)
    return flat


def _mlflow_key(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9_\-./ ]", "_", key)
