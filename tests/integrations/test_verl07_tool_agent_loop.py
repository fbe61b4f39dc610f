"""The interaction as verl 0.7.1 runs it: its real `ToolAgentLoop` and its reward loop (issue 23).

verl 0.8 removed the interaction path, so the installed verl (0.9.1) cannot run it. In a fresh
interpreter, verl 0.7.1 is imported from its wheel (unpacked; the rest of the stack is the
installed one), its `ppo_trainer` config is composed with our interaction YAML and the shipped
reward function, and one `ToolAgentLoop` per trajectory (as its worker builds them) plays
TextCraft rows written by `agenttrain data --first-observation` against a real `agenttrain
serve`, with a fake LLM server client. Each output then goes through verl 0.7.1's naive reward
manager of its reward loop, as its worker's `_compute_score` hands it over.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("verl", reason="agenttrain[verl] not installed (make setup installs it)")

from agenttrain.cli import app
from agenttrain.integrations.verl import reward

WHEELS = Path(sys.prefix) / "wheels"
EPISODES = 6

SCRIPT = r'''
import asyncio, itertools, json, sys, time
from pathlib import Path

sys.path.insert(0, sys.argv[1])  # verl 0.7.1, unpacked
import numpy as np
import torch
import verl
from hydra import compose, initialize_config_dir
from verl import DataProto
from verl.experimental.agent_loop.agent_loop import DictConfigWrap
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
from verl.trainer.ppo.reward import get_custom_reward_fn
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.rollout.replica import TokenOutput
from transformers import AutoTokenizer

from agenttrain.agent.experts import OracleExpert
from agenttrain.agent.formats import get_format
from agenttrain.policy.base import ChatMessage

assert verl.__version__ == "0.7.1", verl.__version__
model_dir, parquet, interaction_yaml, reward_file, episodes = sys.argv[2:7]
overrides = [
    f"actor_rollout_ref.model.path={model_dir}",
    "actor_rollout_ref.rollout.prompt_length=1024",
    "actor_rollout_ref.rollout.response_length=400",
    f"actor_rollout_ref.rollout.multi_turn.interaction_config_path={interaction_yaml}",
    f"reward.custom_reward_function.path={reward_file}",
    "reward.custom_reward_function.name=compute_score",
]
configs = str(Path(verl.__file__).parent / "trainer" / "config")
with initialize_config_dir(config_dir=configs, version_base=None):
    config = compose(config_name="ppo_trainer", overrides=overrides)
tokenizer = AutoTokenizer.from_pretrained(model_dir)


class Replies:
    """The fake LLM server: the TextCraft oracle for every other episode; the others ask for
    the inventory until verl cuts them at response_length (sessions verl abandons)."""

    def __init__(self):
        self.oracle = OracleExpert("textcraft", get_format("react", "textcraft"))
        self.modes, self.alternate = {}, itertools.cycle(["oracle", "stall"])

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
        mode = self.modes.setdefault(request_id, next(self.alternate))
        if mode == "oracle":
            turns = []
            for turn in tokenizer.decode(prompt_ids).split("<|im_start|>")[1:]:
                role, _, content = turn.partition("\n")
                content = content.split("<|im_end|>")[0]
                if role in ("user", "assistant") and content:
                    turns.append(ChatMessage(role, content))
            step = self.oracle.next_step(turns)
            reply = self.oracle.format.render(step.thought, step.action)
        else:
            reply = "Thought: let me check what I have first.\nAction: inventory"
        ids = tokenizer.encode(reply, add_special_tokens=False)
        ids.append(tokenizer.convert_tokens_to_ids("<|im_end|>"))
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids))


def reward_input(output, row):
    """What verl 0.7.1's AgentLoopWorker._compute_score hands its reward loop."""
    ids = output.prompt_ids + output.response_ids
    n = len(output.response_ids)
    batch = {
        "prompts": torch.tensor([output.prompt_ids]),
        "responses": torch.tensor([output.response_ids]),
        "attention_mask": torch.ones(1, len(ids), dtype=torch.long),
        "input_ids": torch.tensor([ids]),
    }
    non_tensor = {k: np.array([row[k]], dtype=object) for k in
                  ("data_source", "reward_model", "extra_info")}
    non_tensor["__num_turns__"] = np.array([output.num_turns])
    non_tensor["tool_extra_fields"] = np.array([output.extra_fields], dtype=object)
    return DataProto.from_dict(tensors=batch, non_tensors=non_tensor)


async def main():
    server = Replies()
    dataset = RLHFDataset(data_files=[parquet], tokenizer=tokenizer, config=config.data)
    scorer = NaiveRewardManager(config, tokenizer, get_custom_reward_fn(config))
    results = []
    for i in range(int(episodes)):
        row = dataset[i // 2]
        loop = ToolAgentLoop(  # one per trajectory, as verl 0.7.1's worker builds them
            trainer_config=DictConfigWrap(config), server_manager=server, tokenizer=tokenizer,
            processor=None, dataset_cls=RLHFDataset, data_config=DictConfigWrap(config.data),
        )
        output = await loop.run({"temperature": 1.0}, **row)
        scored = await scorer.run_single(reward_input(output, row))
        results.append({
            "mode": list(server.modes.values())[-1],
            "turn_scores": output.extra_fields["turn_scores"],
            "response_tokens": len(output.response_ids),
            "reward_score": scored["reward_score"],
            "details": scored["reward_extra_info"],
        })
    time.sleep(float(sys.argv[7]) * 2)  # every abandoned session is now idle past the TTL
    loop = ToolAgentLoop(trainer_config=DictConfigWrap(config), server_manager=server,
                         tokenizer=tokenizer, processor=None, dataset_cls=RLHFDataset,
                         data_config=DictConfigWrap(config.data))
    await loop.interaction_map["agenttrain"].start_interaction("last", env="textcraft", task_id=0)
    print(json.dumps(results))


asyncio.run(main())
'''


@pytest.fixture(scope="module")
def verl071(tmp_path_factory) -> Path:
    """verl 0.7.1's package, unpacked from the wheel `make test` downloads."""
    wheels = sorted(WHEELS.glob("verl-0.7.1-*.whl"))
    assert wheels, f"no verl 0.7.1 wheel in {WHEELS}: run `make test` (it downloads it)"
    root = tmp_path_factory.mktemp("verl071")
    with zipfile.ZipFile(wheels[0]) as wheel:
        wheel.extractall(root, [name for name in wheel.namelist() if name.startswith("verl/")])
    return root


def health(url: str) -> dict:
    with urllib.request.urlopen(f"{url}/health", timeout=10) as response:
        return json.load(response)


@pytest.mark.slow  # over 9 s on 2 cores: the full suite only
def test_verl_071_tool_agent_loop_scores_episodes_and_sweeps_cut_sessions(
    verl071, smollm2_dir, tmp_path, start_textcraft
):
    server = start_textcraft()
    data = ["data", "--env", "textcraft", "--split", "train", "--format", "verl"]
    done = CliRunner().invoke(app, [*data, "--first-observation", "--out", str(tmp_path)])
    assert done.exit_code == 0, done.output
    ttl_s = 1.0
    interaction = tmp_path / "interaction.yaml"
    interaction.write_text(
        "interaction:\n"
        "  - name: agenttrain\n"
        "    class_name: agenttrain.integrations.verl.interaction.AgentTrainInteraction\n"
        f"    config: {{servers: {{textcraft: ['{server.url}']}}, session_ttl_s: {ttl_s}}}\n"
    )
    args = [verl071, smollm2_dir, tmp_path / "textcraft_train.parquet", interaction]
    args += [reward.__file__, EPISODES, ttl_s]
    finished = subprocess.run(
        [sys.executable, "-c", SCRIPT, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert finished.returncode == 0, finished.stderr[-3000:]
    results = json.loads(finished.stdout.strip().splitlines()[-1])

    for result in results:
        details = result["details"]
        assert details["env_error"] == 0.0
        if result["mode"] == "oracle":  # played to the goal: scored by the shipped function
            assert result["reward_score"] == 1.0 == details["success"]
            assert sum(result["turn_scores"]) == 1.0
        else:  # cut by response_length mid-episode: no reward, session left to the sweep
            assert result["reward_score"] == 0.0 == details["success"]
            assert result["response_tokens"] >= 400
    # the cut episodes' sessions were closed once idle; only the last one started is open
    stats = health(server.url)
    assert stats["sessions_created"] == EPISODES + 1
    assert stats["sessions"] == 1
