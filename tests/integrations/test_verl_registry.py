"""The agent loop's settings survive verl's own registry (issue 23, item 1).

verl's `AgentLoopWorker` loads `agent_loop.yaml` into its agent-loop registry and builds every
trajectory's loop with `hydra.utils.instantiate` from that entry. The first instantiation
imports our module; it must not replace the entry (and with it the settings) by a bare target.
Run in a fresh interpreter: the import is what matters, and this process has done it already.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from agenttrain.integrations.verl.settings import LoopSettings, loop_entry

SCRIPT = """
import json, sys
import hydra
from omegaconf import OmegaConf
from transformers import AutoTokenizer
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, _agent_loop_registry
from verl.utils.dataset.rl_dataset import RLHFDataset

# what AgentLoopWorker.__init__ does with actor_rollout_ref.rollout.agent.agent_loop_config_path
for entry in OmegaConf.load(sys.argv[1]):
    _agent_loop_registry[entry.name] = entry
config = OmegaConf.create({
    "actor_rollout_ref": {"rollout": {"prompt_length": 512, "response_length": 1024,
                                      "multi_turn": {}}, "model": {}},
    "data": {"apply_chat_template_kwargs": {}},
})
tokenizer = AutoTokenizer.from_pretrained(sys.argv[2])
seen = []
for trajectory in range(3):  # what AgentLoopWorker._run_agent_loop does per trajectory
    loop = hydra.utils.instantiate(
        config=_agent_loop_registry["agenttrain"],
        trainer_config=DictConfigWrap(config=config),
        server_manager=None,
        tokenizer=tokenizer,
        processor=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
    )
    seen.append(loop.settings.model_dump(mode="json"))
print(json.dumps(seen))
"""


@pytest.mark.slow  # over 9 s on 2 cores: the full suite only
def test_every_trajectory_gets_the_yaml_settings(tmp_path, smollm2_dir):
    settings = LoopSettings(
        servers={"babyai": ["http://127.0.0.1:9"]},
        action_format="json",
        max_turns=3,
        max_new_tokens=96,
        env_timeout_s=7.0,
        max_format_errors=2,
        reward_function=True,
    )
    path = tmp_path / "agent_loop.yaml"
    path.write_text(yaml.safe_dump([loop_entry(settings)], sort_keys=False))
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(path), str(smollm2_dir)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == [settings.model_dump(mode="json")] * 3
