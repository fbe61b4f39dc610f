"""`data.repeat`: every demonstration of a rare kind of task, in copies, within the same limit.

The demonstrations are the oracle's on training tasks 0-11: one of them, the brewing stand,
is a depth-1 goal whose recipe lists two ingredients (the kind the recipe's SFT never
learns from the three or four a 160-sample holds, docs/results.md).
"""

from __future__ import annotations

from collections import Counter

import pytest

from agenttrain.envs.textcraft.env import describe
from agenttrain.sft.data import DataError
from agenttrain.sft.repeat import parse_where
from agenttrain.sft.trainer import SFTTrainer
from sft.test_trainer import recipe


def goals(trainer: SFTTrainer, examples: str = "train_examples") -> Counter[str]:
    """How many times each goal is trained on (or held out)."""
    found = Counter()
    for example in getattr(trainer, examples):
        line = int(example.source.rsplit(":", 1)[1])
        found[trainer_goals(trainer)[line]] += 1
    return found


def trainer_goals(trainer: SFTTrainer) -> dict[int, str]:
    from agenttrain.sft.data import read_conversations

    path = trainer.config.data.train[0]
    conversations = read_conversations(path, "auto", True)
    return {
        int(c.source.rsplit(":", 1)[1]): str(describe(c.opening[-1])["goal"]) for c in conversations
    }


def test_matching_demonstrations_are_all_kept_in_copies_within_the_limit(
    demos_file, tiny_model_dir, tmp_path
):
    """Without `data.repeat`, a limit of 6 usually drops the one two-ingredient goal; with
    it, the goal is trained on twice and the rest of the 6 are other goals, once each, the
    same ones for the same seed."""
    where = ["data.repeat.where=depth=1,ingredients>=2", "data.repeat.times=2"]

    def trained(run: str, *overrides: str) -> Counter[str]:
        config = recipe(
            demos_file,
            tiny_model_dir,
            tmp_path / run,
            "data.limit=6",
            "data.eval_fraction=0",
            *overrides,
        )
        trainer = SFTTrainer(config)
        if overrides:
            assert "1 conversations where depth=1,ingredients>=2, x2 each" in (
                trainer.describe_data()
            )
        return goals(trainer)

    repeated = trained("a", *where)
    assert repeated["brewing stand"] == 2
    assert sum(repeated.values()) == 6
    assert all(count == 1 for goal, count in repeated.items() if goal != "brewing stand")
    assert trained("b", *where) == repeated
    assert trained("c", *where, "run.seed=1") != repeated


def test_a_copy_is_never_both_trained_on_and_held_out(demos_file, tiny_model_dir, tmp_path):
    """The held-out loss measures conversations the model did not train on: holding out a
    repeated conversation holds out all its copies."""
    for seed in range(6):
        trainer = SFTTrainer(
            recipe(
                demos_file,
                tiny_model_dir,
                tmp_path / f"run{seed}",
                "data.repeat.where=ingredients=2",
                "data.repeat.times=3",
                "data.eval_fraction=0.3",
                f"run.seed={seed}",
            )
        )
        trained, held = goals(trainer), goals(trainer, "eval_examples")
        assert not set(trained) & set(held), seed
        assert all(count == 1 for count in held.values())
        assert len(set(trained) | set(held)) == 12  # every goal, trained on or held out
        assert trained["brewing stand"] in (0, 3)
        assert sum(trained.values()) == len(trained) + (2 if trained["brewing stand"] else 0)
        if trained["brewing stand"] == 0:
            return
    pytest.fail("no seed of six held the repeated conversation out")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("data.repeat.where=depth=7", "matches none of the 12 conversations; their attributes"),
        ("data.repeat.where=depth~1", "cannot read 'depth~1'"),
        ("data.repeat.times=7", "x7 = 7, more than data.limit=6"),
    ],
)
def test_a_repeat_that_cannot_apply_is_refused_by_name(
    demos_file, tiny_model_dir, tmp_path, override, message
):
    overrides = ["data.limit=6", "data.repeat.where=goal=brewing stand", override]
    with pytest.raises(DataError, match=message.replace("(", r"\(")) as refused:
        SFTTrainer(recipe(demos_file, tiny_model_dir, tmp_path / "run", *overrides))
    if "none" in message:
        assert "depth, goal, ingredients" in str(refused.value)


def test_conditions_compare_numbers_as_numbers_and_names_as_text():
    attributes = {"depth": 10, "goal": "brewing stand", "ingredients": 2}
    assert all(c.holds(attributes) for c in parse_where("depth>=9, goal=brewing stand"))
    assert not all(c.holds(attributes) for c in parse_where("depth<9,ingredients=2"))
    assert not parse_where("ingredients!=2")[0].holds(attributes)
    assert not parse_where("rooms=2")[0].holds(attributes)  # an attribute it lacks
