"""Round trip of ReMe's own client against `agenttrain memory serve` (not collected by pytest:
it runs in a separate environment holding reme-ai, which conflicts with ours).

    python -m venv /tmp/reme && /tmp/reme/bin/pip install reme-ai==0.2.0.6 'flowllm[reme]==0.2.0.10'
    agenttrain memory serve --port 8001 --pool /tmp/pool.sqlite &
    /tmp/reme/bin/python tests/memory/reme_client_check.py http://127.0.0.1:8001
"""

import asyncio
import json
import sys

from flowllm.core.utils.http_client import HttpClient


async def main(url: str) -> None:
    async with HttpClient(url) as client:
        print("health:", await client.health_check())
        messages = [
            {"role": "user", "content": "Goal: craft stick."},
            {"role": "assistant", "content": "Thought: planks first.\nAction: get 2 oak planks"},
            {"role": "user", "content": "Got 2 oak planks"},
            {"role": "assistant", "content": "Action: craft 4 stick using 2 oak planks"},
            {"role": "user", "content": "Crafted 4 minecraft:stick"},
        ]
        summary = await client.execute_flow(
            "summary_task_memory",
            workspace_id="reme-check",
            trajectories=[{"messages": messages, "score": 1.0}],
        )
        print("summary inserted:", summary.metadata["update_result"]["inserted_count"])
        query = json.dumps(messages[:1])
        found = await client.execute_flow(
            "retrieve_task_memory", workspace_id="reme-check", query=query, top_k=1
        )
        print("retrieve answer:", found.answer)
        assert "craft 4 stick" in found.answer, found
        simple = await client.execute_flow(
            "retrieve_task_memory_simple", workspace_id="reme-check", query="stick", top_k=1
        )
        assert simple.answer.startswith("Previous Memory"), simple
        print("round trip ok")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
