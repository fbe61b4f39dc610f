"""Converting a GGUF model into a Hugging Face folder that does not depend on the converter.

transformers' GGUF reader guesses a tokenizer's special tokens, and the guess changed between
versions (5.10.4 writes `eos_token: <|im_start|>` for SmolLM2, the *start* of a turn). So the
special tokens are taken from the GGUF file's own metadata, written into the tokenizer, model
config and generation config, and checked after conversion: a folder that disagrees with its
GGUF is an error naming both values, never a silently different tokenizer.

A converted folder is keyed by what produced it (the GGUF file's hash and CONVERSION_VERSION),
so a stale or foreign conversion is never reused.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from agenttrain.atomic import atomic_folder
from agenttrain.policy.base import PolicyError

CONVERSION_VERSION = 2
"""Bump when the converted folder's content changes: older folders are then redone."""

PROVENANCE = "agenttrain-source.json"


@dataclass(frozen=True)
class SpecialTokens:
    """Special token ids as the GGUF metadata states them (None: not stated)."""

    bos: int | None
    eos: int
    pad: int | None
    unk: int | None


def read_special_tokens(gguf_path: Path) -> SpecialTokens:
    """bos/eos/pad/unk ids from a GGUF file's `tokenizer.ggml.*` metadata."""
    from gguf import GGUFReader

    fields = GGUFReader(gguf_path).fields

    def value(key: str) -> int | None:
        field = fields.get(f"tokenizer.ggml.{key}_token_id")
        return None if field is None else int(field.contents())

    eos = value("eos")
    if eos is None:
        raise PolicyError(f"{gguf_path} states no eos token (tokenizer.ggml.eos_token_id)")
    return SpecialTokens(bos=value("bos"), eos=eos, pad=value("padding"), unk=value("unknown"))


def file_digest(path: Path) -> str:
    """SHA-256 of a file, remembered per (path, size, mtime) so a process hashes it once."""
    stat = path.stat()
    return _digest(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=8)
def _digest(path: str, size: int, mtime_ns: int) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def conversion_dir(models_root: Path, name: str, gguf_path: Path) -> Path:
    """The folder a conversion of `gguf_path` by this agenttrain version lives in."""
    return models_root / f"{name}-{file_digest(gguf_path)[:12]}-c{CONVERSION_VERSION}"


def is_complete(folder: Path, gguf_path: Path) -> bool:
    """True when `folder` holds a finished conversion of exactly this GGUF file."""
    try:
        provenance = json.loads((folder / PROVENANCE).read_text())
    except (OSError, ValueError):
        return False
    return (
        provenance.get("gguf_sha256") == file_digest(gguf_path)
        and provenance.get("conversion_version") == CONVERSION_VERSION
        and (folder / "config.json").exists()
    )


def convert(gguf_path: Path, target: Path) -> None:
    """Dequantise `gguf_path` into a float32 Hugging Face folder at `target` (atomic)."""
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokens = read_special_tokens(gguf_path)
    source, name = gguf_path.parent, gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=name)
    _pin_tokenizer(tokenizer, tokens)
    loaded = AutoModelForCausalLM.from_pretrained(source, gguf_file=name)
    config = loaded.config
    # A GGUF-loaded model refuses save_pretrained; rebuild it without the quantization setting.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config._name_or_path = target.name
    _pin_config(config, tokens)
    plain = AutoModelForCausalLM.from_config(config)
    plain.load_state_dict(loaded.state_dict())
    _pin_config(plain.generation_config, tokens)
    with atomic_folder(target) as staging:
        plain.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        verify(staging, tokens)
        provenance = {
            "converted_from": str(gguf_path),
            "gguf_sha256": file_digest(gguf_path),
            "conversion_version": CONVERSION_VERSION,
            "transformers": transformers.__version__,
            "special_tokens": asdict(tokens),
            "dtype": "float32",
        }
        (staging / PROVENANCE).write_text(json.dumps(provenance, indent=2))


def _pin_tokenizer(tokenizer: Any, tokens: SpecialTokens) -> None:
    for role, token_id in asdict(tokens).items():
        if token_id is not None:
            setattr(tokenizer, f"{role}_token", tokenizer.convert_ids_to_tokens(token_id))


def _pin_config(config: Any, tokens: SpecialTokens) -> None:
    config.eos_token_id = tokens.eos
    if tokens.bos is not None:
        config.bos_token_id = tokens.bos
    if tokens.pad is not None:
        config.pad_token_id = tokens.pad


def verify(folder: Path, tokens: SpecialTokens) -> None:
    """Reload `folder` and check its special tokens against the GGUF's; raise on a mismatch.

    Also checks that eos is the token the chat template ends an assistant turn with, since
    generation stops there.
    """
    from transformers import AutoTokenizer

    from agenttrain.policy.chat import ChatTemplate

    tokenizer = AutoTokenizer.from_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    generation = json.loads((folder / "generation_config.json").read_text())
    found = {
        "tokenizer eos": tokenizer.eos_token_id,
        "config.json eos_token_id": config.get("eos_token_id"),
        "generation_config.json eos_token_id": generation.get("eos_token_id"),
        "chat template end of turn": ChatTemplate(tokenizer).end_of_turn_id,
    }
    if tokens.bos is not None:
        found["tokenizer bos"] = tokenizer.bos_token_id
    if tokens.pad is not None:
        found["tokenizer pad"] = tokenizer.pad_token_id
    for what, value in found.items():
        expected = tokens.bos if "bos" in what else tokens.pad if "pad" in what else tokens.eos
        if value != expected:
            raise PolicyError(
                f"converted model {folder.name}: {what} is {_describe(tokenizer, value)} but the "
                f"GGUF states {_describe(tokenizer, expected)}"
            )


def _describe(tokenizer: Any, token_id: Any) -> str:
    if not isinstance(token_id, int):
        return repr(token_id)
    return f"{tokenizer.convert_ids_to_tokens(token_id)!r} (id {token_id})"
