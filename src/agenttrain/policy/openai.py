"""Any OpenAI-compatible chat endpoint as a text policy (evaluation and demonstrations only).

Base URL from `base_url` or $OPENAI_BASE_URL (default https://api.openai.com/v1); the key
from the environment variable named by `api_key_env` (default OPENAI_API_KEY), never from
the command line. A served model (vLLM, SGLang, llama.cpp server) works the same way.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence

import aiohttp

from agenttrain.policy.base import ChatMessage, PolicyError, SamplingParams, TextGeneration

RETRY_STATUS = (408, 409, 429, 500, 502, 503, 504)


class OpenAIChatPolicy:
    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        max_concurrency: int = 16,
        timeout_s: float = 120.0,
        retries: int = 4,
    ) -> None:
        self.name = f"openai:{model}"
        self.model = model
        self.base_url = (
            base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        ).rstrip("/")
        self.api_key = os.environ.get(api_key_env)
        self.api_key_env = api_key_env
        self.retries = retries
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._slots = asyncio.Semaphore(max_concurrency)
        self._session: aiohttp.ClientSession | None = None

    async def chat(
        self, conversations: Sequence[Sequence[ChatMessage]], sampling: SamplingParams
    ) -> list[TextGeneration]:
        return list(await asyncio.gather(*(self._one(c, sampling) for c in conversations)))

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _one(
        self, conversation: Sequence[ChatMessage], sampling: SamplingParams
    ) -> TextGeneration:
        body: dict = {
            "model": self.model,
            "messages": [m.to_dict() for m in conversation],
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_new_tokens,
        }
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        url = f"{self.base_url}/chat/completions"
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self.timeout)
        async with self._slots:
            for attempt in range(self.retries + 1):
                try:
                    async with self._session.post(url, json=body, headers=headers) as response:
                        text = await response.text()
                        if response.status == 200:
                            return _parse(url, text)
                        if response.status not in RETRY_STATUS or attempt == self.retries:
                            hint = ""
                            if response.status == 401 and not self.api_key:
                                hint = f" (no API key: set ${self.api_key_env})"
                            raise PolicyError(
                                f"{url} answered HTTP {response.status}: {text[:300]}{hint}"
                            )
                except (aiohttp.ClientError, asyncio.TimeoutError) as failure:
                    if attempt == self.retries:
                        raise PolicyError(
                            f"{url} unreachable: {type(failure).__name__}: {failure}"
                        ) from None
                await asyncio.sleep(min(30.0, 0.5 * 2**attempt))
        raise PolicyError(f"{url}: no answer")  # unreachable: the loop returns or raises


def _parse(url: str, text: str) -> TextGeneration:
    import json

    try:
        data = json.loads(text)
        choice = data["choices"][0]
        content = choice["message"].get("content") or ""
    except (ValueError, KeyError, IndexError, TypeError):
        raise PolicyError(
            f"{url} answered something that is not a chat completion: {text[:300]}"
        ) from None
    reason = "length" if choice.get("finish_reason") == "length" else "stop"
    return TextGeneration(content, reason, data.get("usage") or {})
