"""The embedded model's conversion: special tokens from the GGUF, folders keyed by provenance."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from agenttrain.atomic import one_at_a_time
from agenttrain.policy import gguf_convert
from agenttrain.policy.base import PolicyError
from agenttrain.policy.chat import ChatTemplate
from agenttrain.policy.models import EMBEDDED, cache_root, embedded_model_dir


@pytest.fixture(scope="module")
def gguf_path(smollm2_dir):
    return Path(json.loads((smollm2_dir / gguf_convert.PROVENANCE).read_text())["converted_from"])


def test_the_gguf_states_smollm2s_special_tokens(gguf_path):
    tokens = gguf_convert.read_special_tokens(gguf_path)
    assert tokens == gguf_convert.SpecialTokens(bos=1, eos=2, pad=2, unk=0)


def test_the_converted_tokenizer_ends_a_turn_with_im_end(smollm2_dir):
    """transformers 5.10.4's own GGUF reader writes eos <|im_start|>; ours must not."""
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.bos_token == "<|im_start|>"
    assert tokenizer.pad_token == "<|im_end|>"
    generation = json.loads((smollm2_dir / "generation_config.json").read_text())
    assert generation["eos_token_id"] == tokenizer.eos_token_id
    stops = ChatTemplate(tokenizer).stop_ids
    assert stops == {tokenizer.convert_tokens_to_ids("<|im_end|>")}


def test_the_conversion_lives_in_the_suites_own_cache(smollm2_dir):
    assert smollm2_dir.parent == cache_root() / "models"
    assert smollm2_dir.name.startswith(EMBEDDED["smollm2-135m"].name + "-")


def test_a_conversion_of_another_gguf_or_version_is_not_reused(smollm2_dir, gguf_path, tmp_path):
    assert gguf_convert.is_complete(smollm2_dir, gguf_path)
    for change in ({"gguf_sha256": "0" * 64}, {"conversion_version": 1}):
        folder = tmp_path / str(len(list(tmp_path.iterdir())))
        folder.mkdir()
        shutil.copy(smollm2_dir / "config.json", folder)
        provenance = json.loads((smollm2_dir / gguf_convert.PROVENANCE).read_text())
        (folder / gguf_convert.PROVENANCE).write_text(json.dumps({**provenance, **change}))
        assert not gguf_convert.is_complete(folder, gguf_path)
    other = tmp_path / "other.gguf"
    other.write_bytes(b"not the same model")
    root = tmp_path / "models"
    assert gguf_convert.conversion_dir(root, "m", other) != gguf_convert.conversion_dir(
        root, "m", gguf_path
    )


def test_a_second_process_waits_for_the_conversion_under_way_and_reuses_it(
    smollm2_dir, gguf_path, tmp_path, monkeypatch
):
    """Two first runs on a fresh machine (or two test workers): the second must not convert
    again, nor replace the folder the first is already loading from."""
    monkeypatch.setenv("AGENTTRAIN_CACHE", str(tmp_path))
    conversions: list[Path] = []
    monkeypatch.setattr(gguf_convert, "convert", lambda _gguf, target: conversions.append(target))
    target = tmp_path / "models" / smollm2_dir.name
    found: list[Path] = []
    with one_at_a_time(target.parent / f".{target.name}.lock"):  # the first run converts
        second = threading.Thread(target=lambda: found.append(embedded_model_dir()))
        second.start()
        second.join(timeout=1.0)
        assert second.is_alive() and not conversions  # it waits instead of converting
        target.symlink_to(smollm2_dir)  # the first run's conversion appears
    second.join(timeout=30)
    assert found == [target] and not conversions


def test_a_wrong_eos_is_an_error_naming_both_tokens(smollm2_dir, gguf_path, tmp_path):
    folder = tmp_path / "converted"
    shutil.copytree(smollm2_dir, folder, ignore=shutil.ignore_patterns("*.safetensors"))
    config_file = folder / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    config.update(eos_token="<|im_start|>", eos_token_id=1)  # what transformers 5.10.4 wrote
    config_file.write_text(json.dumps(config))
    tokens = gguf_convert.read_special_tokens(gguf_path)
    with pytest.raises(
        PolicyError,
        match=r"tokenizer eos is '<\|im_start\|>' \(id 1\).*"
        r"GGUF states '<\|im_end\|>' \(id 2\)",
    ):
        gguf_convert.verify(folder, tokens)
