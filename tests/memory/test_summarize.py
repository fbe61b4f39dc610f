"""Summarizers (rules, and an LLM behind an OpenAI-compatible API) and the BM25 fallback."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from fastapi import FastAPI

from agenttrain.memory import embedding
from agenttrain.memory.experience import EpisodeRecord, Step
from agenttrain.memory.summarize import build_summarizer
from support import serve_in_thread

FAILED = EpisodeRecord(
    "4",
    "train",
    "iron bars",
    (Step("get 6 iron ingot", "Got 6 iron ingot"),)
    + (Step("craft iron bars", "Could not find enough items", True),) * 2,
    0.0,
    False,
)


def test_rules_say_what_to_avoid_after_a_failure_and_nothing_without_refusals():
    rules = build_summarizer("rules")
    [avoid] = asyncio.run(rules.summarize(FAILED))
    assert avoid.when_to_use == "Task: iron bars"
    assert "`craft iron bars` (2x: Could not find enough items)" in avoid.content
    quiet = EpisodeRecord("5", "train", "stick", (Step("look", "You see planks"),), 0.0, False)
    assert asyncio.run(rules.summarize(quiet)) == []


def test_an_llm_summarizer_uses_the_openai_api(monkeypatch):
    app = FastAPI()
    asked: list[dict] = []

    @app.post("/v1/chat/completions")
    async def chat(body: dict) -> dict:
        asked.append(body)
        items = [{"when_to_use": "crafting bars", "experience": "collect 6 ingots first"}]
        message = {"role": "assistant", "content": "Here:\n" + json.dumps(items)}
        return {"choices": [{"message": message, "finish_reason": "stop"}], "usage": {}}

    monkeypatch.setenv("OPENAI_API_KEY", "test")
    with serve_in_thread(app) as url:
        summarizer = build_summarizer("openai:judge", base_url=f"{url}/v1")

        async def scenario():
            try:
                return await summarizer.summarize(FAILED)
            finally:
                await summarizer.backend.aclose()

        [experience] = asyncio.run(scenario())
    assert asked[0]["model"] == "judge" and "iron bars" in asked[0]["messages"][0]["content"]
    assert (experience.when_to_use, experience.content) == (
        "crafting bars",
        "collect 6 ingots first",
    )
    assert experience.author == "openai:judge" and experience.task_id == "4"


def test_without_the_embedder_retrieval_falls_back_to_bm25_and_says_so(monkeypatch, caplog):
    monkeypatch.setattr(embedding, "embedding_available", lambda: False)
    embedding._announce_fallback.cache_clear()
    with caplog.at_level(logging.WARNING):
        assert embedding.load_embedder("auto") is None
        assert embedding.load_embedder("auto") is None
    assert sum("uses BM25" in r.message for r in caplog.records) == 1
    with pytest.raises(embedding.EmbedderMissing, match=r"memory\.retrieval=bm25"):
        embedding.load_embedder("embedding")
