"""`agenttrain demos --still-needed`: thoughts that say what the item they work toward lacks.

Each sentence is checked against the real game: the episode's actions are replayed in a fresh
game up to the sentence's turn, and the game's own inventory says what is held.
"""

from __future__ import annotations

import re
from collections import Counter

from typer.testing import CliRunner

from agenttrain.cli import app
from agenttrain.envs.textcraft.env import TextCraftEnv, describe
from agenttrain.envs.textcraft.tasks import splits
from sft.test_quotes import assert_stage_writes, demos, replies, train_positions

NEEDS = re.compile(
    r" (?:Still needed for (?P<item>.+?): (?P<listed>.+?)|Nothing more is needed for "
    r"(?P<done>.+?))\.(?=\n\nAction:)"
)
ACTION = re.compile(r"\n\nAction:\n(.*)$", re.S)
CRAFT = re.compile(r"craft \d+ (.+?) using (.+)")
HELD = re.compile(r"\[(.+?)\] \((\d+)\)")


def held_after(task_id: int, actions: list[str]) -> Counter[str]:
    """The game's inventory after `actions`, as it reports it."""
    env = TextCraftEnv()
    env.reset_sync(task_id)
    for action in actions:
        env.step_sync(action)
    report = env.step_sync("inventory").observation
    return Counter({name: int(count) for name, count in HELD.findall(report)})


def crafts_made(task_id: int, actions: list[str]) -> list[bool]:
    """Per action: whether the game made a craft of it (a refused craft, in a recovery
    demonstration, uses nothing)."""
    env = TextCraftEnv()
    env.reset_sync(task_id)
    made = []
    for action in actions:
        result = env.step_sync(action)
        made.append(result.observation.startswith("Crafted") or result.reward > 0)
    return made


def used_by(actions: list[str], made: list[bool], item: str) -> Counter[str]:
    """What the crafts of `item` the game made among `actions` used."""
    used: Counter[str] = Counter()
    for action, crafted in zip(actions, made, strict=True):
        if crafted and (match := CRAFT.fullmatch(action)) and match[1] == item:
            for part in match[2].split(", "):
                count, name = part.split(" ", 1)
                used[name] += int(count)
    return used


def two_ingredient_positions(count: int) -> list[int]:
    """Train positions of depth-1 goals whose recipe lists two or more ingredients."""
    found = []
    for position, task_id in enumerate(splits()["train"]):
        first = TextCraftEnv()
        described = describe(first.reset_sync(task_id).text)
        if described["depth"] == 1 and described["ingredients"] >= 2:
            found.append(position)
        if len(found) == count:
            return found
    return found


def test_each_sentence_lists_what_the_games_inventory_lacks(tmp_path):
    """After a trained `get` or craft, the sentence names every ingredient the item's crafts
    still need beyond what the game's inventory holds, with the shortfall; "Nothing more"
    exactly when none. Recovery demonstrations included; actions are the oracle's."""
    positions = two_ingredient_positions(2) + train_positions(2, 3) + train_positions(3, 2)
    extra = ["--recovery", "1", "--recovery-from", "both", "--quote-recipes"]
    _, plain = demos(tmp_path / "quoted.jsonl", positions, *extra)
    output, rewritten = demos(tmp_path / "needs.jsonl", positions, *extra, "--still-needed")
    assert f"{len(positions)} with thoughts that say what each item still needs" in output
    kinds = Counter()
    for before, after in zip(plain, rewritten, strict=True):
        said = replies(after)
        assert [NEEDS.sub("", r) for r in said] == replies(before)  # nothing else changed
        actions = [ACTION.search(r)[1] for r in said[1:]]
        made = crafts_made(after["task_id"], actions)
        trained = [
            m.get("loss") is not False for m in after["messages"] if m["role"] == "assistant"
        ]
        for turn, reply in enumerate(said[1:]):
            match = NEEDS.search(reply)
            if match is None:
                continue
            assert trained[turn + 1]  # only trained turns say it
            item = match["item"] or match["done"]
            held = held_after(after["task_id"], actions[: turn + 1])
            need = used_by(actions[turn + 1 :], made[turn + 1 :], item)
            lacking = {
                name: count - held[name] for name, count in need.items() if held[name] < count
            }
            listed = dict(
                (name, int(count))
                for count, name in (
                    part.split(" ", 1) for part in (match["listed"] or "").split(", ") if part
                )
            )
            assert listed == lacking, (after["task_id"], turn, reply)
            kinds["still" if match["item"] else "nothing"] += 1
    assert kinds["still"] >= 5 and kinds["nothing"] >= 5, kinds


def test_still_needed_where_it_cannot_be_written_is_refused_before_play(tmp_path):
    out = tmp_path / "demos.jsonl"
    args = ["demos", "--tasks", "0", "--out", str(out), "--still-needed", "--format", "json"]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code != 0
    assert "--still-needed writes react thoughts; --format is 'json'" in result.output
    assert not out.exists()


def test_the_recipe_demos_stage_writes_them_when_asked_and_records_it(tmp_path):
    assert_stage_writes(tmp_path, "configs/textcraft_recipe.yaml", "demos.still_needed=true", NEEDS)
