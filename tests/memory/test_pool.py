"""The pool: retrieval by goal among distractors, the train-split guard, surviving a restart."""

from __future__ import annotations

import pytest

from agenttrain.memory.embedding import MiniLMEmbedder
from agenttrain.memory.experience import Experience, SplitLeak, require_train_split
from agenttrain.memory.pool import ExperiencePool

GOALS = {
    "dark oak sign": "craft 6 dark oak planks from dark oak logs, then 1 stick, then the sign",
    "iron pickaxe": "get 3 iron ingots and 2 sticks, then craft the pickaxe",
    "cyan wool": "get white wool and cyan dye, then craft cyan wool",
    "golden apple": "get 8 gold ingots and 1 apple, then craft the golden apple",
    "birch boat": "craft birch planks from birch logs, then the boat",
}


def experiences(split: str = "train", step: int = 1) -> list[Experience]:
    return [
        Experience(f"Task: {goal}", content, 1.0, str(n), split, run_step=step)
        for n, (goal, content) in enumerate(GOALS.items())
    ]


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder()


@pytest.mark.parametrize("retrieval", ["bm25", "embedding"])
def test_retrieval_returns_the_experience_of_the_goal_among_distractors(
    retrieval, minilm, tmp_path
):
    pool = ExperiencePool(tmp_path / "pool.sqlite", minilm if retrieval == "embedding" else None)
    assert pool.add(experiences()) == len(GOALS)
    for goal, content in GOALS.items():
        [best] = pool.search(f"craft {goal}", top_k=1)
        assert best.content == content
    ranked = pool.search("iron pickaxe or golden apple", top_k=3)
    assert {item.when_to_use for item in ranked[:2]} == {"Task: iron pickaxe", "Task: golden apple"}


def test_embedding_ranks_a_paraphrased_goal_first(minilm, tmp_path):
    pool = ExperiencePool(tmp_path / "pool.sqlite", minilm)
    pool.add(experiences())
    [best] = pool.search("make a pick for mining made of iron", top_k=1)
    assert best.when_to_use == "Task: iron pickaxe"


def test_only_train_split_experiences_enter_the_pool(tmp_path):
    pool = ExperiencePool(tmp_path / "pool.sqlite")
    with pytest.raises(SplitLeak, match="task 0 is from split 'test'"):
        pool.add(experiences(split="test"))
    assert pool.count() == 0
    with pytest.raises(SplitLeak, match="task 7 is labelled 'train' but is not in"):
        require_train_split("7", "train", {"1", "2"})


def test_identical_experiences_are_stored_once(tmp_path):
    pool = ExperiencePool(tmp_path / "pool.sqlite")
    pool.add(experiences())
    assert pool.add(experiences()) == 0
    assert pool.count() == len(GOALS)


def test_the_pool_file_survives_a_restart_and_forgets_steps_to_replay(tmp_path):
    path = tmp_path / "run" / "memory" / "pool.sqlite"
    pool = ExperiencePool(path)
    pool.add(experiences(step=1))
    pool.add([Experience("Task: stone axe", "get cobblestone", 1.0, "9", "train", run_step=3)])
    del pool  # no close: a crashed process leaves the file as the last commit left it
    reopened = ExperiencePool(path)
    assert reopened.count() == len(GOALS) + 1
    assert reopened.drop_after(2) == 1
    assert all(item.task_id != "9" for item in reopened.search("stone axe", top_k=5))
    assert reopened.count() == len(GOALS)
