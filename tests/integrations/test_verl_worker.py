"""The agent loop as verl 0.9.1 runs it: its own `AgentLoopWorker.generate_sequences` (issue 23).

In a fresh interpreter, verl's `main_ppo` config is composed from the overrides that
`agenttrain verl config` prints, the worker is built from it (it loads our `agent_loop.yaml`
into its registry), the batch comes from the parquet files written beside it through verl's
`RLHFDataset`, and a fake LLM server client plays the model's tokens (no GPU, no Ray). Two
environments: TextCraft behind a real `agenttrain serve` on loopback, Largest Number behind an
address nobody listens on.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("verl", reason="agenttrain[verl] not installed (make setup installs it)")

from agenttrain.cli import app

MAX_TURNS, MAX_NEW_TOKENS, GROUP = 3, 48, 2

SCRIPT = r'''
import asyncio, itertools, json, sys
from pathlib import Path

import verl
from hydra import compose, initialize_config_dir
from verl import DataProto
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
from verl.workers.rollout.replica import TokenOutput

from agenttrain.agent.experts import OracleExpert
from agenttrain.agent.formats import get_format
from agenttrain.policy.base import ChatMessage

args = json.loads(Path(sys.argv[1]).read_text())
group = int(sys.argv[2])
configs = str(Path(verl.__file__).parent / "trainer" / "config")
with initialize_config_dir(config_dir=configs, version_base=None):
    config = compose(config_name="ppo_trainer", overrides=args)


class Replies:
    """verl's LLM server client, faked: every other episode plays the TextCraft oracle's
    next step, the others ask for the inventory forever (so only the turn limit ends them)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.oracle = OracleExpert("textcraft", get_format("react", "textcraft"))
        self.modes = {}
        self.alternate = itertools.cycle(["oracle", "inventory"])
        self.calls = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
        mode = self.modes.setdefault(request_id, next(self.alternate))
        self.calls.append({"request_id": request_id, "max_tokens": sampling_params["max_tokens"]})
        if mode == "oracle":
            step = self.oracle.next_step(self.conversation(prompt_ids))
            reply = self.oracle.format.render(step.thought, step.action)
        else:
            reply = "Thought: let me look.\nAction: inventory"
        ids = self.tokenizer.encode(reply, add_special_tokens=False)
        ids.append(self.tokenizer.convert_tokens_to_ids("<|im_end|>"))
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids))

    def conversation(self, prompt_ids):
        turns = []
        for turn in self.tokenizer.decode(prompt_ids).split("<|im_start|>")[1:]:
            role, _, content = turn.partition("\n")
            content = content.split("<|im_end|>")[0]
            if role in ("user", "assistant") and content:
                turns.append(ChatMessage(role, content))
        return turns


async def main():
    worker = AgentLoopWorker(config, None)
    worker.llm_client = server = Replies(worker.tokenizer)
    rows = []
    for path in config.data.train_files:
        dataset = RLHFDataset(data_files=[path], tokenizer=worker.tokenizer, config=config.data)
        rows += [dataset[i] for i in range(2)]
    batch = DataProto.from_single_dict(collate_fn(rows)).repeat(group, interleave=True)
    out = await worker.generate_sequences(batch)
    prompt_width = out.batch["prompts"].shape[1]
    episodes = []
    for i in range(len(out)):
        length = int(out.batch["attention_mask"][i, prompt_width:].sum())
        fields = {k: out.non_tensor_batch[k][i] for k in
                  ("agenttrain_env", "finish_reason", "env_error", "env_reward")}
        episodes.append({
            **{k: v.item() if hasattr(v, "item") else v for k, v in fields.items()},
            "mask": out.batch["response_mask"][i, :length].tolist(),
            "scores": out.batch["rm_scores"][i, :length].tolist(),
        })
    print(json.dumps({"episodes": episodes, "calls": server.calls, "modes": server.modes}))


asyncio.run(main())
'''


def verl_overrides(config: Path, model_dir: Path, tmp_path: Path) -> list[str]:
    """What `agenttrain verl config` prints (one shell word per override) and writes."""
    args = ["verl", "config", str(config), f"model.path={model_dir}"]
    args += [f"run.out_dir={tmp_path / 'run'}", "--data-dir", str(tmp_path / "data")]
    result = CliRunner().invoke(app, [*args, "--write-data"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    end = next(i for i, line in enumerate(lines) if "keys verl cannot follow" in line)
    return [shlex.split(line)[0] for line in lines[:end] if line.strip()]


def health(url: str) -> dict:
    with urllib.request.urlopen(f"{url}/health", timeout=10) as response:
        return json.load(response)


@pytest.mark.slow  # over 9 s on 2 cores: the full suite only
def test_verl_worker_keeps_settings_masks_scores_and_closes_sessions(
    smollm2_dir, tmp_path, start_textcraft
):
    server = start_textcraft()
    recipe = tmp_path / "two.yaml"
    recipe.write_text(
        "envs:\n"
        f"  - {{name: textcraft, servers: ['{server.url}']}}\n"
        "  - {name: largest, servers: ['http://127.0.0.1:9']}\n"  # nobody listens there
        f"rollout: {{max_turns: {MAX_TURNS}, max_new_tokens: {MAX_NEW_TOKENS}}}\n"
        f"data: {{batch_tasks: 2, group_size: {GROUP}}}\n"
    )
    args = tmp_path / "overrides.json"
    args.write_text(json.dumps(verl_overrides(recipe, smollm2_dir, tmp_path)))
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(args), str(GROUP)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    episodes = seen["episodes"]
    assert len(episodes) == 4 * GROUP  # two tasks of each environment, GROUP samples each

    # every model call of every trajectory ran under the YAML's settings
    assert {call["max_tokens"] for call in seen["calls"]} == {MAX_NEW_TOKENS}
    per_episode: dict[str, int] = {}
    for call in seen["calls"]:
        per_episode[call["request_id"]] = per_episode.get(call["request_id"], 0) + 1
    textcraft = [e for e in episodes if e["agenttrain_env"] == "textcraft"]
    assert len(per_episode) == len(textcraft)  # one request id per episode
    for request_id, calls in per_episode.items():
        assert calls <= MAX_TURNS
        if seen["modes"][request_id] == "inventory":
            assert calls == MAX_TURNS  # only the YAML's turn limit ends these

    # the unreachable server is each of its episodes' env error, not the batch's end
    for episode in episodes:
        if episode["agenttrain_env"] == "largest":
            assert (episode["finish_reason"], episode["env_error"]) == ("env_error", 1)
            assert not any(episode["mask"])
    # textcraft episodes ran, and the score sits on the last token: a model token
    assert {e["finish_reason"] for e in textcraft} <= {"done", "max_turns"}
    assert "max_turns" in {e["finish_reason"] for e in textcraft}
    for episode in textcraft:
        assert episode["env_error"] == 0 and episode["mask"][-1] == 1
        assert episode["scores"][-1] == episode["env_reward"]
        assert not any(episode["scores"][:-1])

    # every session the episodes opened on the server was closed
    stats = health(server.url)
    assert stats["sessions"] == 0
    assert stats["sessions_created"] == stats["sessions_closed"] == len(textcraft)
