"""`agenttrain demos --todo`: replies that probe with `get` and carry a to-do list."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from agenttrain.cli import app
from agenttrain.config import ConfigError
from agenttrain.envs.textcraft.env import TextCraftEnv
from agenttrain.envs.textcraft.game import refused
from agenttrain.envs.textcraft.oracle import crafting_blocks, plan
from agenttrain.envs.textcraft.tasks import splits, task
from agenttrain.sft.data import read_conversations
from sft.test_quotes import (
    ACTION,
    QUOTE,
    assert_stage_writes,
    demos,
    demos_stage,
    replies,
    train_positions,
)

TODO = re.compile(r"To do: (.+)\.\n\nAction:\n")
MUST_CRAFT = re.compile(r"^Thought:\n(.+?) cannot be fetched: it must be crafted\. ", re.I)


def todo(reply: str) -> list[str]:
    return TODO.search(reply)[1].split(", ")


BATCHES = re.compile(r"(craft .+) (\d+) times$")


def entry(action: str) -> str:
    """How the to-do names an action: a craft by its item, a `get` as sent."""
    if action.startswith("craft "):
        return "craft " + action.split(" using ")[0].split(" ", 2)[2]
    return action


def done(todo: list[str]) -> list[str]:
    """The list once its first entry is done: one batch fewer, or the entry gone."""
    batches = BATCHES.match(todo[0])
    if batches is None:
        return todo[1:]
    left = int(batches[2]) - 1
    return [batches[1] if left == 1 else f"{batches[1]} {left} times", *todo[1:]]


def test_each_action_is_the_lists_head_and_a_refusal_opens_the_items_recipe(tmp_path):
    """The list is the plan as the policy can know it: an action done drops its entry; a
    refused `get` of a crafted item is replaced by that item's plan, ending in its craft,
    right after its recipe is quoted as the task lists it."""
    positions = train_positions(1, 3) + train_positions(2, 4) + train_positions(3, 2)
    positions += batched_positions(2)
    output, records = demos(tmp_path / "todo.jsonl", positions, "--todo")
    assert f"{len(positions)} of {len(positions)} rewritten to probe with get" in output
    for record in records:
        listed = task(record["task_id"]).commands
        said = replies(record)[1:]
        observations = [m["content"] for m in record["messages"] if m["role"] == "user"][2:]
        lists = [todo(reply) for reply in said]
        actions = [ACTION.search(reply)[1] for reply in said]
        goal = task(record["task_id"]).goal_name
        assert QUOTE.findall(said[0]) == [(goal, next(c for c in listed if f" {goal} using " in c))]
        assert lists[-1] == [f"craft {goal}"]
        for k, (action, seen) in enumerate(zip(actions[:-1], observations, strict=True)):
            assert entry(action) == BATCHES.sub(r"\1", lists[k][0])
            if not refused(seen):
                assert lists[k + 1] == done(lists[k]) and not QUOTE.search(said[k + 1])
                continue
            item = MUST_CRAFT.match(said[k + 1])[1]
            assert action.startswith("get ") and action.endswith(item.lower())
            ((quoted, command),) = QUOTE.findall(said[k + 1])
            assert quoted.lower() == item.lower() and command in listed
            opened = lists[k + 1][: len(lists[k + 1]) - len(lists[k]) + 1]
            assert BATCHES.sub(r"\1", opened[-1]) == f"craft {quoted}"
            assert lists[k + 1][len(opened) :] == lists[k][1:]


def batched_positions(count: int) -> list[int]:
    """The first `count` train positions whose plan crafts an item more than once."""
    found = []
    for position, task_id in enumerate(splits()["train"]):
        crafts = [p.action for p in plan(task(task_id).goal) if p.action.startswith("craft ")]
        if len(set(crafts)) < len(crafts):
            found.append(position)
    return found[:count]


def test_batches_are_one_entry_counted_down(tmp_path):
    """Listing every batch taught the policy to write `craft stick, craft stick, ...` until the
    token limit; a count says the same in three tokens."""
    positions = batched_positions(3)
    _, records = demos(tmp_path / "todo.jsonl", positions, "--todo")
    for record in records:
        lists = [todo(reply) for reply in replies(record)[1:]]
        assert any(BATCHES.match(e) for t in lists for e in t)
        assert all(len(set(t)) == len(t) for t in lists)  # no entry twice in a row or at all


def test_todo_demos_win_in_the_game_with_every_reply_trained(tmp_path):
    """The probes are the behaviour taught, so they carry loss; the crafts and basic `get`s
    are the oracle's, one probe more for each item crafted on the way."""
    positions = train_positions(2, 3) + train_positions(3, 1)
    out = tmp_path / "todo.jsonl"
    _, records = demos(out, positions, "--todo")
    for record, conversation in zip(records, read_conversations(out), strict=True):
        actions = [ACTION.search(reply)[1] for reply in replies(record)[1:]]
        oracle, blocks, _ = crafting_blocks(task(record["task_id"]).goal)
        assert [a for a in actions if a not in {f"get {b.amount} {b.name}" for b in blocks}] == [
            p.action for p in plan(task(record["task_id"]).goal)
        ]
        assert len(actions) == len(oracle) + len(blocks) - 1
        env = TextCraftEnv()
        env.reset_sync(record["task_id"])
        assert [env.step_sync(a).reward for a in actions][-1] == 1.0
        trained = [conversation.trainable[i] for i, m in enumerate(conversation.messages)]
        assistant = [i for i, m in enumerate(conversation.messages) if m["role"] == "assistant"]
        assert [trained[i] for i in assistant] == [False] + [True] * len(actions)


def test_a_recovering_todo_demo_sends_a_craft_too_early_untrained_then_lists_the_get_again(
    tmp_path,
):
    """To-do SFT models met a refused craft only in their own episodes and then wrote the
    game's text into their list; with `--recovery` a share of the demonstrations shows one,
    answered by the list before the slip, whose head is the `get` the craft lacked."""
    positions = train_positions(1, 3) + train_positions(2, 3)
    out = tmp_path / "todo.jsonl"
    output, records = demos(out, positions, "--todo", "--recovery", "1")
    assert f"{len(positions)} of {len(positions)} rewritten to recover from a refused craft" in (
        output
    )
    for record, conversation in zip(records, read_conversations(out), strict=True):
        assistant = [i for i, m in enumerate(conversation.messages) if m["role"] == "assistant"]
        slips = [i for i in assistant[1:] if not conversation.trainable[i]]
        assert len(slips) == 1
        slip, recovery = slips[0], assistant[assistant.index(slips[0]) + 1]
        messages = conversation.messages
        assert messages[slip + 1]["content"].startswith("Could not find enough items")
        said = messages[recovery]["content"]
        assert said.startswith("Thought:\nThe craft was refused: an ingredient is missing.")
        assert todo(said)[1:] == todo(messages[slip]["content"])  # the dropped get, back
        assert todo(said)[0].startswith("get ") and ACTION.search(said)[1] == todo(said)[0]
        env = TextCraftEnv()
        env.reset_sync(record["task_id"])
        actions = [ACTION.search(r)[1] for r in replies(record)[1:]]
        assert [env.step_sync(a).reward for a in actions][-1] == 1.0


@pytest.mark.parametrize(
    "other",
    [
        ["--quote-recipes"],
        ["--still-needed"],
        ["--recovery-from both", "--recovery", "1"],
        ["--recovery-style inventory", "--recovery", "1"],
    ],
)
def test_todo_with_another_rewrite_is_refused_before_play(tmp_path, other):
    out = tmp_path / "demos.jsonl"
    args = ["demos", "--tasks", "0", "--out", str(out), "--todo", *other[0].split(), *other[1:]]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code != 0 and f"does not combine with {other[0]}" in result.output
    assert not out.exists()


def test_the_recipe_demos_stage_writes_todo_replies_and_records_it(tmp_path):
    plain = "configs/textcraft_recipe_plain.yaml"
    assert_stage_writes(tmp_path, plain, "demos.todo=true", TODO)
    recovering = ("demos.todo=true", "demos.recovery=1")
    path = demos_stage(tmp_path / "recovering", plain, *recovering).make_demos()
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert all(any(m.get("loss") is False for m in r["messages"][2:]) for r in records)
    with pytest.raises(ConfigError, match="does not combine with --quote-recipes"):
        demos_stage(tmp_path, plain, "demos.todo=true", "demos.quote_recipes=true")
