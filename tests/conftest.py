"""Shared fixtures: real `agenttrain serve` processes on loopback."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# The suite's own cache (converted models, task tables), inside the checkout and git-ignored:
# a user's ~/.cache or $AGENTTRAIN_CACHE can neither break nor fix a test. Set before any
# agenttrain import; subprocesses (`agenttrain serve`, CLI runs) inherit it.
TEST_CACHE = Path(__file__).resolve().parent.parent / ".test-cache"
os.environ["AGENTTRAIN_CACHE"] = str(TEST_CACHE)

# Under pytest-xdist (`make test`) the workers share the cores: each (and every process it
# starts) gets its share of threads, or torch's default of one thread per core in every
# worker oversubscribes them and the suite runs slower than on one worker.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_name, str(max(1, (os.cpu_count() or 1) // _WORKERS)))

from agenttrain.serving.launch import ServerProcess, start_server  # noqa: E402


@pytest.fixture(scope="session")
def textcraft_url() -> Iterator[str]:
    """One `agenttrain serve textcraft` process shared by the read-mostly tests."""
    server = start_server("textcraft", extra_args=["--max-sessions", "4096"])
    yield server.url
    server.stop()


@pytest.fixture
def start_textcraft() -> Iterator[Callable[..., ServerProcess]]:
    """Start extra TextCraft servers with custom flags; all stopped after the test."""
    started: list[ServerProcess] = []

    def start(*args: str) -> ServerProcess:
        server = start_server("textcraft", extra_args=list(args))
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def smollm2_dir():
    """The embedded SmolLM2 as a Hugging Face folder (converted from GGUF on first use)."""
    from agenttrain.policy.models import embedded_model_dir

    return embedded_model_dir()


@pytest.fixture(scope="session")
def tokenizer(smollm2_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


@pytest.fixture(scope="session")
def tiny_model(tokenizer):
    """A randomly initialised 2-layer Llama over SmolLM2's vocabulary (fast unit tests)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=len(tokenizer),
        tie_word_embeddings=True,
        max_position_embeddings=4096,
        initializer_range=0.2,
    )
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tiny_model, tokenizer):
    """The tiny random model as a model folder (with SmolLM2's tokenizer)."""
    folder = tmp_path_factory.mktemp("tiny-llama")
    tiny_model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(autouse=True)
def _console_width_follows_columns() -> Iterator[None]:
    """A test that sets the CLI console's width (monkeypatch restores it as a fixed width)
    must not make every later test's console 80 columns wide whatever COLUMNS says."""
    yield
    import sys

    cli = sys.modules.get("agenttrain.cli")
    if cli is not None:
        cli.console._width = None
