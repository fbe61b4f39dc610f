"""`agenttrain export`: a checkpoint as a standalone Hugging Face model folder."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from agenttrain.policy.models import ModelSpec, in_local_cache, load_hf, resolve


@dataclass
class Exported:
    folder: Path
    kind: str
    """`full`, `merged` or `lora-adapter`."""
    notes: list[str] = field(default_factory=list)


def export(
    source: str, out: Path, merge_lora: bool = False, base_model: str | None = None
) -> Exported:
    """Write the model `source` names (a run, checkpoint or model folder) to `out`.

    A LoRA checkpoint is merged into its base with `merge_lora` (a plain model transformers and
    vLLM load as is); otherwise it is written as an adapter whose config names its base:
    `base_model` (a Hub id or a path the other machine has) when given, else the base's
    absolute path here, with a note when that path is this machine's converted copy.
    """
    spec = resolve(source)
    if spec.path is None:
        raise ValueError(f"{source!r} is not a local model or checkpoint")
    if base_model is not None and (spec.base is None or merge_lora):
        raise ValueError("--base-model names the base of an adapter export (a LoRA checkpoint)")
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"{out} exists and is not empty; choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    if spec.base is not None and not merge_lora:
        exported = _adapter(spec, out, base_model)
    else:
        exported = _weights(spec, out)
    provenance = {"exported_from": str(spec.path.resolve()), "kind": exported.kind}
    (out / "agenttrain-export.json").write_text(json.dumps(provenance, indent=2))
    return exported


def _adapter(spec: ModelSpec, out: Path, base_model: str | None) -> Exported:
    assert spec.path is not None and spec.base is not None
    for item in spec.path.iterdir():
        if item.is_file():
            shutil.copy2(item, out / item.name)
    base = base_model or str(spec.base.resolve())
    adapter_config = json.loads((out / "adapter_config.json").read_text())
    adapter_config["base_model_name_or_path"] = base
    (out / "adapter_config.json").write_text(json.dumps(adapter_config, indent=2))
    exported = Exported(out, "lora-adapter")
    if base_model is None and in_local_cache(spec.base):
        exported.notes.append(
            f"the adapter's base is this machine's converted copy ({base}); for another machine "
            "export again with --base-model <a Hub id or a path it has>, or --merge-lora"
        )
    return exported


def _weights(spec: ModelSpec, out: Path) -> Exported:
    model, tokenizer = load_hf(spec)
    if spec.base is not None:
        model = model.merge_and_unload()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return Exported(out, "merged" if spec.base is not None else "full")
