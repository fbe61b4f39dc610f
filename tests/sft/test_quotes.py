"""`agenttrain demos --quote-recipes`: thoughts that quote the listed recipe they follow."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agenttrain.cli import app
from agenttrain.config import ConfigError
from agenttrain.envs.textcraft.oracle import crafted_ingredients, recipes_used
from agenttrain.envs.textcraft.tasks import num_tasks, splits, task
from agenttrain.recipe import Recipe, StageChanged, load_recipe
from agenttrain.sft.data import read_conversations

QUOTE = re.compile(r'The recipe for (.+?) is "(craft [^"]+)"\. ')
ACTION = re.compile(r"Action:\n(.*)$", re.S)
KINDS = re.compile(
    r'The recipe for (.+?) is "craft [^"]+"\. '
    r"(?:All its ingredients are basic|Its ingredients? (.+?) must be crafted first)\. "
)


def train_positions(depth: int, count: int) -> list[int]:
    """The first `count` positions of the train split whose goals have crafting `depth`."""
    ids = splits()["train"]
    return [p for p, task_id in enumerate(ids) if task(task_id).depth == depth][:count]


def demos(out: Path, positions: list[int], *extra: str) -> tuple[str, list[dict]]:
    tasks = ",".join(map(str, positions))
    args = ["demos", "--tasks", tasks, "--out", str(out), *extra]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())  # a line the console wrapped reads the same
    return said, [json.loads(line) for line in out.read_text().splitlines()]


def demos_stage(tmp_path: Path, config: str, *extra: str) -> Recipe:
    """A recipe (`config` with `extra` overrides) whose demos stage plays train tasks 0 and 1
    into `tmp_path`."""
    overrides = [f"run.out_dir={tmp_path}", "demos.tasks=[0,1]", *extra]
    return Recipe(load_recipe(Path(config), overrides))


def assert_stage_writes(tmp_path: Path, config: str, setting: str, said: re.Pattern) -> None:
    """The recipe's demos stage with `setting` writes replies that `said` finds, in every
    demonstration, and records it: the same folder without it is another run."""
    path = demos_stage(tmp_path, config, setting).make_demos()
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(records) == 2
    assert all(any(said.search(reply) for reply in replies(r)) for r in records)
    with pytest.raises(StageChanged):
        demos_stage(tmp_path, config).make_demos()


def replies(record: dict) -> list[str]:
    return [m["content"] for m in record["messages"] if m["role"] == "assistant"]


def test_the_first_reply_quotes_the_goals_line_then_each_item_once_on_first_use(tmp_path):
    """The goal's own line, exactly as the task lists it, comes first; a deeper item's line
    comes the first time a turn works toward it; the actions are the oracle's."""
    positions = train_positions(1, 3) + train_positions(2, 3) + train_positions(3, 2)
    _, plain = demos(tmp_path / "plain.jsonl", positions)
    output, quoted = demos(tmp_path / "quoted.jsonl", positions, "--quote-recipes")
    assert f"{len(positions)} with thoughts that quote the recipes they follow" in output
    for before, after in zip(plain, quoted, strict=True):
        listed = task(after["task_id"]).commands
        goal = task(after["task_id"]).goal_name
        quotes = [QUOTE.findall(reply) for reply in replies(after)]
        assert quotes[1][0] == (goal, next(c for c in listed if f" {goal} using " in c))
        seen = [item for turn in quotes for item, _ in turn]
        crafted = recipes_used(task(after["task_id"]).goal)
        assert sorted(seen) == sorted(set(seen)) == sorted(crafted)  # each once
        assert all(command in listed for turn in quotes for _, command in turn)
        actions = [ACTION.search(reply)[1] for reply in replies(after)[1:]]
        assert actions == [turn["action"] for turn in before["turns"]]
    deep = [q for q in quoted if task(q["task_id"]).depth >= 2]
    assert all(len(QUOTE.findall(replies(q)[1])) >= 2 for q in deep)  # goal, then its input


def test_quotes_on_recovery_demos_skip_the_refused_turn_and_train_like_trajectories(tmp_path):
    positions = train_positions(1, 2) + train_positions(2, 4)
    out = tmp_path / "demos.jsonl"
    demos(out, positions, "--recovery", "1", "--recovery-from", "both", "--quote-recipes")
    for conversation in read_conversations(out):
        messages = conversation.messages
        assistant = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        assert not conversation.trainable[assistant[0]]  # the acknowledgement
        for i in assistant[1:]:
            if not conversation.trainable[i]:  # the refused slip: as the recovery wrote it
                assert not QUOTE.search(messages[i]["content"])
        trained = [messages[i]["content"] for i in assistant if conversation.trainable[i]]
        goal = task(conversation.task_id).goal_name
        assert QUOTE.findall(trained[0])[0][0] == goal  # the first trained reply quotes it


def test_every_task_lists_the_recipes_the_oracle_quotes():
    for task_id in range(num_tasks()):
        listed = task(task_id).commands
        assert all(cmd in listed for cmd, _ in recipes_used(task(task_id).goal).values())


def test_quoted_ingredients_name_the_crafted_ones_and_change_nothing_else(tmp_path):
    """Each quote is followed by the ingredients the plan crafts ("All its ingredients are
    basic." when none); without those sentences the demos are --quote-recipes' own."""
    positions = train_positions(1, 3) + train_positions(2, 3) + train_positions(3, 2)
    _, quoted = demos(tmp_path / "quoted.jsonl", positions, "--quote-recipes")
    output, kinds = demos(
        tmp_path / "kinds.jsonl", positions, "--quote-recipes", "--quote-ingredients"
    )
    assert "quote the recipes they follow and the kinds of their ingredients" in output
    for before, after in zip(quoted, kinds, strict=True):
        crafted = crafted_ingredients(task(after["task_id"]).goal)
        said = [m for reply in replies(after) for m in KINDS.finditer(reply)]
        assert sorted(m[1] for m in said) == sorted(crafted)  # a sentence after every quote
        for m in said:
            assert (m[2] or "") == " and ".join(crafted[m[1]])
        stripped = [KINDS.sub(lambda m: m[0][: m[0].index('". ') + 3], r) for r in replies(after)]
        assert stripped == replies(before)
        first = replies(after)[1]
        depth = task(after["task_id"]).depth
        assert ("All its ingredients are basic" in first.split(". The recipe")[0]) == (depth == 1)


def test_quoted_ingredients_without_quotes_are_refused(tmp_path):
    out = tmp_path / "demos.jsonl"
    args = ["demos", "--tasks", "0", "--out", str(out), "--quote-ingredients"]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code != 0
    assert "--quote-ingredients follows each quote of --quote-recipes; give both" in result.output
    assert not out.exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--env", "babyai"], "--quote-recipes exists for textcraft only, not 'babyai'"),
        (["--format", "json"], "--quote-recipes writes react thoughts; --format is 'json'"),
    ],
)
def test_quotes_where_they_cannot_be_written_are_refused_before_play(tmp_path, extra, message):
    out = tmp_path / "demos.jsonl"
    args = ["demos", "--tasks", "0", "--out", str(out), "--quote-recipes", *extra]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code != 0 and message in result.output
    assert not out.exists()


def test_the_recipe_demos_stage_quotes_when_asked_and_records_it(tmp_path):
    plain = "configs/textcraft_recipe_plain.yaml"
    assert_stage_writes(tmp_path, plain, "demos.quote_recipes=true", QUOTE)
    with pytest.raises(StageChanged):  # nor are quotes with the ingredients' kinds
        both = ("demos.quote_recipes=true", "demos.quote_ingredients=true")
        demos_stage(tmp_path, plain, *both).make_demos()
    with pytest.raises(ConfigError, match="--quote-ingredients follows each quote"):
        demos_stage(tmp_path, plain, "demos.quote_ingredients=true")
