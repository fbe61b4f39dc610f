"""`agenttrain export`: a checkpoint as a standalone Hugging Face model folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from agenttrain.policy.models import load_hf, resolve


def export(source: str, out: Path, merge_lora: bool = False) -> Path:
    """Write the model `source` names (a run, checkpoint or model folder) to `out`.

    A LoRA checkpoint is merged into its base with `merge_lora` (a plain model transformers and
    vLLM load as is); otherwise it is written as an adapter whose config points at the base.
    """
    spec = resolve(source)
    if spec.path is None:
        raise ValueError(f"{source!r} is not a local model or checkpoint")
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"{out} exists and is not empty; choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    if spec.base is not None and not merge_lora:
        for item in spec.path.iterdir():
            if item.is_file():
                shutil.copy2(item, out / item.name)
        adapter_config = json.loads((out / "adapter_config.json").read_text())
        adapter_config["base_model_name_or_path"] = str(spec.base.resolve())
        (out / "adapter_config.json").write_text(json.dumps(adapter_config, indent=2))
        kind = "lora-adapter"
    else:
        model, tokenizer = load_hf(spec)
        if spec.base is not None:
            model = model.merge_and_unload()
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        kind = "merged" if spec.base is not None else "full"
    provenance = {"exported_from": str(spec.path.resolve()), "kind": kind}
    (out / "agenttrain-export.json").write_text(json.dumps(provenance, indent=2))
    return out
