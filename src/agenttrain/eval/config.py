"""What an evaluation plays: tasks, models, samples, sampling and limits (`agenttrain eval`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agenttrain.rollout.engine import RolloutConfig


class EvalConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    env: str = "textcraft"
    split: str = Field("test", description="a split name, or 'all' for every task id")
    tasks: list[int] | None = Field(None, description="positions within the split")
    models: list[str] = Field(default_factory=lambda: ["smollm2-135m"])
    backend: Literal["hf", "vllm", "openai"] = "hf"
    n: int = Field(1, ge=1, description="samples per task and seed")
    seeds: list[int] = Field(default_factory=lambda: [0])
    temperature: float = Field(0.7, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Constructor arguments of the in-process environment."""
    servers: list[str] = Field(default_factory=list)
    token: str | None = None
    device: str = "cpu"
    inference_dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    draft_tokens: int | None = Field(None, ge=0)
    """Guessed tokens per decode step (`model.draft_tokens`); None: the decode path's default."""
    workers: int = Field(1, ge=1)
    """Processes playing one model's episodes at once, each with its share of the CPU's
    threads: on a CPU, 2 single-threaded processes generate ~2x the tokens of one process
    (eval/workers.py). A GPU is fed by one process."""
    openai_base_url: str | None = None
    max_env_error_rate: float = Field(
        0.05,
        ge=0,
        le=1,
        description="largest share of env-error episodes a model's scores may rest on",
    )
    out: Path = Path("runs/eval")
    replace: bool = False
    """Discard a model's earlier evaluation in `out` made with other settings (else refused)."""

    @model_validator(mode="after")
    def _workers_on_cpu(self) -> EvalConfig:
        if self.workers > 1 and (self.device != "cpu" or self.backend != "hf"):
            raise ValueError(
                f"workers={self.workers} splits a CPU's threads between processes: it needs "
                f"--device cpu and --backend hf (here {self.device}, {self.backend}); "
                "a GPU or a server is fed by one process (--workers 1)"
            )
        return self
