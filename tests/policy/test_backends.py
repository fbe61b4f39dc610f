"""The OpenAI-compatible backend (against a stand-in endpoint), vLLM's absence, model specs."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from fastapi import FastAPI, Request

from agenttrain.agent.formats import get_format
from agenttrain.envs import get_spec, make_env
from agenttrain.policy.base import ChatMessage, PolicyError, SamplingParams
from agenttrain.policy.chat_adapter import ChatPolicyAdapter
from agenttrain.policy.models import EMBEDDED, resolve
from agenttrain.policy.openai import OpenAIChatPolicy
from agenttrain.rollout import EpisodeRequest, RolloutConfig, RolloutEngine
from support import serve_in_thread


def fake_openai_endpoint(replies: list[str], fail_first: int = 0) -> FastAPI:
    """Answers /v1/chat/completions in OpenAI's documented shape (no real API runs here)."""
    app = FastAPI()
    app.state.requests = []
    state = {"failures": fail_first}

    @app.post("/v1/chat/completions")
    async def completions(request: Request):
        body = await request.json()
        app.state.requests.append((request.headers.get("authorization"), body))
        if state["failures"]:
            state["failures"] -= 1
            from fastapi.responses import JSONResponse

            return JSONResponse({"error": {"message": "rate limited"}}, status_code=429)
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant") - 1
        content = replies[min(turn, len(replies) - 1)]
        return {
            "id": "x",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": content},
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5},
        }

    return app


def test_an_openai_compatible_model_plays_episodes(monkeypatch):
    replies = [
        "Thought: wheat first.\nAction: get 3 wheat",
        "Thought: bake.\nAction: craft 1 bread using 3 wheat",
    ]
    app = fake_openai_endpoint(replies, fail_first=1)
    monkeypatch.setenv("TEST_KEY", "sk-test")
    with serve_in_thread(app) as url:
        backend = OpenAIChatPolicy("gpt-test", base_url=f"{url}/v1", api_key_env="TEST_KEY")
        policy = ChatPolicyAdapter(backend)
        engine = RolloutEngine(
            policy,
            get_spec("textcraft"),
            lambda: make_env("textcraft"),
            RolloutConfig(),
            SamplingParams(temperature=0.3, max_new_tokens=64),
        )
        # Two runs in two event loops: the backend's HTTP session lives in the adapter's own
        # loop, so it survives the first run's loop closing.
        [first] = asyncio.run(engine.run([EpisodeRequest(12, "g")]))
        [trajectory] = asyncio.run(engine.run([EpisodeRequest(12, "h")]))
        asyncio.run(policy.aclose())
    assert first.success and trajectory.success and trajectory.num_turns == 2
    assert trajectory.model == "openai:gpt-test" and trajectory.prompt_ids == []
    authorization, body = app.state.requests[-1]
    assert authorization == "Bearer sk-test"
    assert body["model"] == "gpt-test" and body["temperature"] == 0.3 and body["max_tokens"] == 64
    assert (
        body["messages"][0]["role"] == "user"
        and "crafting recipes" in body["messages"][0]["content"]
    )
    assert len(app.state.requests) == 5  # four turns, and the 429 was retried


def test_an_unreachable_endpoint_is_a_clear_error():
    policy = OpenAIChatPolicy("m", base_url="http://127.0.0.1:9/v1", retries=0)
    with pytest.raises(PolicyError, match=r"http://127.0.0.1:9/v1/chat/completions unreachable"):
        asyncio.run(policy.chat([[ChatMessage("user", "hi")]], SamplingParams()))


def test_vllm_backend_says_how_to_install_it():
    from agenttrain.policy.vllm import import_vllm

    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(PolicyError, match=r"pip install 'agenttrain\[vllm\]'"):
            import_vllm()
    else:  # pragma: no cover - only on GPU machines with the extra
        assert import_vllm() is not None


def test_model_specs(tmp_path, smollm2_dir):
    assert resolve("oracle").kind == "oracle"
    assert resolve("openai:gpt-4o-mini").remote_model == "gpt-4o-mini"
    assert resolve("smollm2-135m").path == smollm2_dir
    assert (smollm2_dir / "model.safetensors").exists() and "smollm2-135m" in EMBEDDED
    assert json.loads((smollm2_dir / "agenttrain-source.json").read_text())["dtype"] == "float32"
    assert resolve(str(smollm2_dir)).path == smollm2_dir
    with pytest.raises(PolicyError, match="unknown model"):
        resolve("gpt2")
    with pytest.raises(PolicyError, match="needs a model name"):
        resolve("openai:")
    (tmp_path / "checkpoints").mkdir()
    with pytest.raises(PolicyError, match="no checkpoints yet"):
        resolve(str(tmp_path))


def test_the_oracle_policy_needs_an_environment_with_one():
    from agenttrain.agent.experts import OracleExpert

    with pytest.raises(PolicyError, match="no oracle for 'webshop'"):
        OracleExpert("webshop", get_format("react", "webshop"))


def test_decoding_prints_no_transformers_notice_and_decodes_as_before(smollm2_dir):
    """The embedded tokenizer's files say clean_up_tokenization_spaces=True, which BPE ignores;
    transformers said so on every command's first decode, burying our output."""
    script = (
        "import sys\n"
        "from agenttrain.policy.models import load_hf, resolve\n"
        f"_, tokenizer = load_hf(resolve({str(smollm2_dir)!r}))\n"
        "text = 'craft 1 stick using 2 oak planks . Got it !'\n"
        "assert tokenizer.decode(tokenizer(text).input_ids) == text\n"
        "import logging; logging.getLogger('transformers').warning('other messages still show')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "clean_up_tokenization_spaces" not in done.stderr
    assert "other messages still show" in done.stderr
