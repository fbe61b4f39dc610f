"""`agenttrain data --format verl`: the parquet loads in verl's own `RLHFDataset` with our
columns intact, and each row selects our agent loop and names its environment and task."""

from __future__ import annotations

import pytest

from agenttrain.agent.conversation import conversation_start
from agenttrain.agent.formats import get_format
from agenttrain.envs import get_spec
from agenttrain.integrations.verl.data import export_data
from agenttrain.integrations.verl.settings import AGENT_NAME

pytest.importorskip("verl", reason="agenttrain[verl] not installed (make setup installs it)")


def load_in_verl(path, tokenizer, tmp_path, max_prompt_length=1024):
    """The file as verl's trainer reads it (`RLHFDataset`, overlong prompts filtered out)."""
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset

    config = OmegaConf.create(
        {
            "max_prompt_length": max_prompt_length,
            "filter_overlong_prompts": True,
            "filter_overlong_prompts_workers": 1,
            "return_raw_chat": True,
            "cache_dir": str(tmp_path / "cache"),
        }
    )
    return RLHFDataset(data_files=str(path), tokenizer=tokenizer, config=config)


def test_parquet_loads_in_verls_dataset_with_our_columns_intact(tokenizer, tmp_path):
    written = export_data("textcraft", "train", tmp_path, "verl", positions=[0, 1, 2, 5])
    assert written.path == tmp_path / "textcraft_train.parquet" and written.rows == 4
    task_ids = [get_spec("textcraft").split("train")[p] for p in (0, 1, 2, 5)]

    dataset = load_in_verl(written.path, tokenizer, tmp_path)

    assert len(dataset) == 4  # none dropped as overlong
    spec = get_spec("textcraft")
    start = conversation_start(spec, get_format("react", spec))
    for index, task_id in enumerate(task_ids):
        item = dataset[index]
        assert item["agent_name"] == AGENT_NAME
        assert item["data_source"] == "agenttrain/textcraft"
        assert item["ability"] == "agent/textcraft"
        assert item["reward_model"] == {"style": "env", "ground_truth": str(task_id)}
        assert [dict(m) for m in item["raw_prompt"]] == start  # no first observation
        extra = item["extra_info"]
        assert (extra["env"], extra["task_id"], extra["split"]) == ("textcraft", task_id, "train")
        kwargs = {"name": AGENT_NAME, "env": "textcraft", "task_id": task_id}
        assert item["interaction_kwargs"] == kwargs
        assert item["index"] == index


def test_prompt_settings_reach_the_rows(tokenizer, tmp_path):
    written = export_data(
        "largest",
        "test",
        tmp_path,
        "verl",
        positions=[0],
        action_format="json",
        prompt_style="agentgym",
        system_prompt="You are a careful agent.",
    )
    item = load_in_verl(written.path, tokenizer, tmp_path)[0]
    spec = get_spec("largest")
    expected = conversation_start(spec, get_format("json", spec), "agentgym")
    assert [dict(m) for m in item["raw_prompt"]] == [
        {"role": "system", "content": "You are a careful agent."},
        *expected,
    ]
    assert item["extra_info"]["split"] == "test"


def test_first_observation_ends_the_prompt_for_the_interaction_path(
    tokenizer, tmp_path, textcraft_url
):
    """verl <= 0.7's interaction answers only after the model's first reply, so its rows
    carry the task's first observation, read here from a real server."""
    import asyncio

    from agenttrain.envs import make_env
    from agenttrain.envs.source import EnvSource

    source = EnvSource("textcraft", servers=[textcraft_url])
    written = export_data(
        "textcraft", "val", tmp_path, "verl", positions=[3, 4], first_observation_from=source
    )
    dataset = load_in_verl(written.path, tokenizer, tmp_path)
    for index, position in enumerate((3, 4)):
        task_id = get_spec("textcraft").split("val")[position]
        expected = asyncio.run(make_env("textcraft").reset(task_id)).text
        item = dataset[index]
        assert dict(item["raw_prompt"][-1]) == {"role": "user", "content": expected}
        assert item["extra_info"]["task_id"] == task_id
