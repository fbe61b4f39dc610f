"""`agenttrain demos --recovery`: oracle demonstrations with one refused action and its
recovery."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from agenttrain.cli import app
from agenttrain.envs.textcraft.env import TextCraftEnv
from agenttrain.envs.textcraft.game import refused
from agenttrain.envs.textcraft.recoveries import REFUSED_CRAFT, REFUSED_GET, refusal_outcomes
from agenttrain.envs.textcraft.recovery import REFUSAL
from agenttrain.sft.data import read_conversations

ACTION = re.compile(r"Action:\n(.*)$", re.S)


def demos(out, *extra):
    args = ["demos", "--tasks", "0-11", "--out", str(out), *extra]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return result.output, [json.loads(line) for line in out.read_text().splitlines()]


def test_a_recovery_demo_is_refused_untrained_then_recovers_trained(tmp_path):
    output, records = demos(tmp_path / "demos.jsonl", "--recovery", "1")
    rewritten = [record for record in records if "turns" not in record]
    assert f"{len(rewritten)} of 12 rewritten to recover from a refused craft" in output
    assert len(rewritten) >= 10  # nearly every oracle plan has a get followed by a craft
    conversations = list(read_conversations(tmp_path / "demos.jsonl"))
    for record, conversation in zip(records, conversations, strict=True):
        if record in rewritten:
            check_recovery(record, conversation.trainable)


def check_recovery(record, trainable, checked=False):
    """One refused craft without loss, then (`checked`: an inventory check, then) a trained
    `get`, every observation the game's, and the goal made."""
    messages = record["messages"]
    replies = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    assert not trainable[replies[0]]  # the acknowledgement, as in trajectories
    answers = {i: messages[i + 1]["content"] for i in replies[1:] if i + 1 < len(messages)}
    refused = [i for i, answer in answers.items() if answer.startswith(REFUSAL)]
    assert len(refused) == 1  # one slip, and nothing else is refused
    slip = refused[0]
    assert not trainable[slip] and ACTION.search(messages[slip]["content"])[1].startswith("craft")
    recovery = slip + 2 + 2 * checked
    fetched = ACTION.search(messages[recovery]["content"])[1]
    assert trainable[recovery] and fetched.startswith("get ")
    if checked:
        assert ACTION.search(messages[slip + 2]["content"])[1] == "inventory"
        check_named_lack(messages[recovery - 1]["content"], messages[recovery]["content"])
    assert all(trainable[i] for i in replies[1:] if i != slip)
    replayed(record)


def check_named_lack(inventory: str, reply: str) -> None:
    """The `get` after an inventory check names the item it fetches and what the inventory
    holds of it."""
    item = re.search(r"Action:\nget [0-9]+ (.*)$", reply)[1]
    held = dict((name, int(n)) for name, n in re.findall(r"\[(.+?)\] \(([0-9]+)\)", inventory))
    if item in held:
        assert f"The inventory has only {held[item]} {item}, not enough." in reply
    else:
        assert f"The inventory has no {item}." in reply


def test_inventory_style_checks_the_inventory_and_names_what_it_lacks(tmp_path):
    _, records = demos(tmp_path / "demos.jsonl", "--recovery", "1", "--recovery-style", "inventory")
    rewritten = [record for record in records if "turns" not in record]
    assert len(rewritten) >= 10
    conversations = list(read_conversations(tmp_path / "demos.jsonl"))
    for record, conversation in zip(records, conversations, strict=True):
        if record in rewritten:
            check_recovery(record, conversation.trainable, checked=True)


@pytest.mark.parametrize(
    "option", [["--recovery-style", "inventory"], ["--recovery-from", "get"]], ids=" ".join
)
def test_replies_written_here_in_a_format_without_thoughts_are_refused_before_playing(
    tmp_path, option
):
    out = tmp_path / "demos.jsonl"
    args = ["demos", "--out", str(out), "--recovery", "1", *option]
    result = CliRunner().invoke(app, [*args, "--format", "json"])
    assert result.exit_code == 2, result.output
    assert f"{' '.join(option)} writes react replies" in result.output
    assert not out.exists()


def rewrites(records):
    """Which demos were rewritten, and how (other records carry fresh episode ids)."""
    return [record["messages"] if "turns" not in record else None for record in records]


def test_the_same_seed_rewrites_the_same_demos_and_share_zero_none(tmp_path):
    _, first = demos(tmp_path / "a.jsonl", "--recovery", "0.5")
    _, again = demos(tmp_path / "b.jsonl", "--recovery", "0.5")
    _, other = demos(tmp_path / "c.jsonl", "--recovery", "0.5", "--seed", "3")
    _, plain = demos(tmp_path / "d.jsonl")
    assert rewrites(first) == rewrites(again)
    assert rewrites(first) != rewrites(other)
    assert 0 < sum("turns" not in record for record in first) < 12
    assert all("turns" in record for record in plain)


def test_recovery_for_an_env_without_it_is_refused_before_playing(tmp_path):
    out = tmp_path / "demos.jsonl"
    args = ["demos", "--env", "babyai", "--out", str(out), "--recovery", "0.5"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "--recovery exists for textcraft only, not 'babyai'" in result.output
    assert not out.exists()


def actions_of(record):
    return [ACTION.search(m["content"])[1].strip() for m in record["messages"][3::2]]


def test_a_get_slip_asks_for_an_intermediate_untrained_then_fetches_its_tree(tmp_path):
    output, records = demos(tmp_path / "demos.jsonl", "--recovery", "1", "--recovery-from", "get")
    rewritten = [record for record in records if "turns" not in record]
    assert f"{len(rewritten)} of 12 rewritten to recover from a refused get" in output
    assert len(rewritten) == 12  # every plan crafts something, so any can ask for it instead
    conversations = list(read_conversations(tmp_path / "demos.jsonl"))
    for record, conversation in zip(records, conversations, strict=True):
        messages, trainable = record["messages"], conversation.trainable
        slips = [i for i in range(3, len(messages) - 1, 2) if refused(messages[i + 1]["content"])]
        assert len(slips) == 1  # one slip, and nothing else is refused
        slip = slips[0]
        item = re.fullmatch(r"get [0-9]+ (.*)", ACTION.search(messages[slip]["content"])[1])[1]
        assert messages[slip + 1]["content"] == f"Could not find {item}"
        assert not trainable[slip] and trainable[slip + 2]
        assert messages[slip + 2]["content"].startswith(
            f"Thought:\n{item[:1].upper()}{item[1:]} cannot be fetched: it must be crafted. "
        )
        # The game's own count: the next move adds an item of the item's tree, or crafts it.
        assert refusal_outcomes(record["task_id"], actions_of(record)) == [(REFUSED_GET, True)]
        replayed(record)


def replayed(record):
    """Every observation is the game's answer to the action before it, and the goal is made."""
    env = TextCraftEnv()
    env.reset_sync(record["task_id"])
    messages = record["messages"]
    for i, action in zip(range(3, len(messages), 2), actions_of(record), strict=True):
        result = env.step_sync(action)
        if i + 1 < len(messages):
            assert messages[i + 1]["content"] == result.observation
    assert result.reward == 1.0 and result.done


def test_both_writes_each_slip_in_some_demos_and_one_per_demo(tmp_path):
    output, records = demos(tmp_path / "demos.jsonl", "--recovery", "1", "--recovery-from", "both")
    assert "12 of 12 rewritten to recover from a refused craft or get" in output
    kinds = [
        [kind for kind, _ in refusal_outcomes(record["task_id"], actions_of(record))]
        for record in records
    ]
    assert all(len(each) == 1 for each in kinds), kinds
    assert {REFUSED_CRAFT, REFUSED_GET} == {each[0] for each in kinds}
