"""`agenttrain compare` says how episodes failed: each failed episode under the first thing
that went wrong in it (TextCraft: the kind of the first refused action), and how many resent
a refused action. Episodes are played on the real game; observations are its own."""

from __future__ import annotations

from dataclasses import replace

from typer.testing import CliRunner

from agenttrain.cli import app
from agenttrain.envs.textcraft.env import SPEC, TextCraftEnv
from agenttrain.eval.compare import compare
from agenttrain.eval.failures import failure_view, first_failure
from agenttrain.rollout.trajectory import Trajectory, Turn, write_jsonl
from eval.test_compare import WIDE

runner = CliRunner()
BEACON = 2  # craft 1 beacon using 1 nether star, 5 glass, 3 obsidian
CRAFT = "craft 1 beacon using 1 nether star, 5 glass, 3 obsidian"
MADE_UP = "craft 1 beacon using 9 glass"  # refused as made up once the glass is held


def played(model: str, sample: int, *actions: str | None) -> Trajectory:
    """An episode of the beacon task; None is a reply the action format refused."""
    env = TextCraftEnv()
    env.reset_sync(BEACON)
    turns = []
    for action in actions:
        if action is None:
            turns.append(Turn("no action", None, "format error", 0.0, False, format_error=True))
            continue
        outcome = env.step_sync(action)
        turns.append(Turn(f"Action: {action}", action, outcome.observation, 0.0, outcome.done))
    solved = turns[-1].observation.startswith("Crafted 1 minecraft:beacon")
    return Trajectory(
        episode_id=f"{model}-{sample}",
        env="textcraft",
        task_id=BEACON,
        group_id=f"{BEACON}",
        sample=sample,
        seed=0,
        model=model,
        turns=turns,
        reward=float(solved),
        success=solved,
        finish_reason="done" if solved else "max_turns",
        task_info={"depth": 1},
    )


SOLVE = ("get 1 nether star", "get 5 glass", "get 3 obsidian", CRAFT)


def write_runs(root):
    """SFT-like: a made-up recipe resent, a craft before its ingredients, a refused get, a
    format error. GRPO-like: two solved, the craft before its ingredients, then recovered
    nothing but changed course, and a run of `inventory` to the turn limit."""
    before = [
        played("sft", 0, "get 9 glass", MADE_UP, MADE_UP),
        played("sft", 1, "get 5 glass", CRAFT, CRAFT),
        played("sft", 2, "get 1 beacon", "get 1 beacon"),
        played("sft", 3, None, CRAFT),
    ]
    after = [
        played("grpo", 0, *SOLVE),
        played("grpo", 1, *SOLVE),
        played("grpo", 2, "get 5 glass", CRAFT, "get 1 nether star"),
        played("grpo", 3, "inventory", "inventory"),
    ]
    for name, episodes in (("sft", before), ("grpo", after)):
        write_jsonl(root / name / "episodes.jsonl", episodes)
    return root / "sft" / "episodes.jsonl", root / "grpo" / "episodes.jsonl"


def test_each_failed_episode_is_filed_under_its_first_refusal(tmp_path):
    view = compare(list(write_runs(tmp_path))).failures
    assert view is not None
    sft, grpo = view.counts
    assert view.failed == {sft: (4, 4), grpo: (2, 4)}
    assert view.counts[sft] == {
        "made-up recipe": 1,
        "missing ingredients": 1,
        "refused get (craftable or unknown item)": 1,
        "format error": 1,  # before its refused craft
    }
    assert view.counts[grpo] == {"missing ingredients": 1, "nothing refused: turn limit": 1}
    assert view.kinds[0] == "missing ingredients"  # the most frequent over both runs
    # resent word for word after a refusal: the made-up recipe, the early craft, the get
    assert view.loops == {sft: 3, grpo: 0}


def test_compare_prints_the_failures_and_writes_them_to_compare_md(tmp_path):
    sft, grpo = write_runs(tmp_path)
    out = tmp_path / "cmp"
    result = runner.invoke(app, ["compare", str(sft), str(grpo), "--out", str(out)], env=WIDE)
    assert result.exit_code == 0, result.output
    assert "how episodes failed" in result.output and "made-up recipe" in result.output
    markdown = (out / "compare.md").read_text().split("## How episodes failed")[1]
    assert "| failed / scored | 4/4 | 2/4 |" in markdown
    assert "| missing ingredients | 1 (25%) | 1 (50%) |" in markdown
    assert "| made-up recipe | 1 (25%) | 0 (0%) |" in markdown
    assert "| resent a refused action | 3 (75%) | 0 (0%) |" in markdown


def test_an_environment_without_refusal_kinds_files_refusals_as_one_kind():
    episode = played("m", 0, "get 9 glass", MADE_UP)
    only_refused = replace(SPEC, refusal_kind=None)
    assert failure_view([("m", [episode])], only_refused).counts["m"] == {"refused action": 1}
    neither = replace(SPEC, refusal_kind=None, refused=None)
    view = failure_view([("m", [episode])], neither)
    assert view.counts["m"] == {"nothing refused: turn limit": 1} and view.loops is None
    assert first_failure(episode, SPEC.refusal_kind) == "made-up recipe"


def test_a_reply_cut_off_by_the_token_limit_is_filed_apart_from_other_format_errors():
    """Deep goals' thoughts pass the 96 tokens the recipe generates: the lever is the limit."""
    cut = played("m", 0, None, CRAFT)
    cut.turns[0] = replace(cut.turns[0], cut_off=True)
    refused = played("m", 1, None, CRAFT)
    view = failure_view([("m", [cut, refused])], SPEC)
    assert view.counts["m"] == {
        "format error: reply cut off at the token limit": 1,
        "format error": 1,
    }


def test_runs_without_a_failure_get_no_section(tmp_path):
    for name in ("a", "b"):
        write_jsonl(tmp_path / name / "episodes.jsonl", [played(name, 0, *SOLVE)])
    comparison = compare([tmp_path / "a" / "episodes.jsonl", tmp_path / "b" / "episodes.jsonl"])
    assert comparison.failures is None


def test_failures_are_also_told_within_each_depth(tmp_path):
    """What fails at depth 1 is not what fails deeper: one table per breakdown group."""
    sft, grpo = write_runs(tmp_path)
    deeper = [played("sft", 4, "get 1 beacon"), played("grpo", 4, "get 1 beacon")]
    for episode, file in zip(deeper, (sft, grpo), strict=True):
        episode.task_info = {"depth": 2}  # labelled deeper: only the grouping is under test
        write_jsonl(file, [episode], append=True)
    comparison = compare([sft, grpo])
    assert list(comparison.failures_by_group) == ["1", "2"]
    depth2 = comparison.failures_by_group["2"]
    assert depth2.failed == {label: (1, 1) for label in depth2.failed}
    assert set(depth2.kinds) == {"refused get (craftable or unknown item)"}
    first = comparison.first.label
    assert comparison.failures_by_group["1"].failed[first] == (4, 4)
    out = tmp_path / "cmp"
    result = runner.invoke(app, ["compare", str(sft), str(grpo), "--out", str(out)], env=WIDE)
    assert result.exit_code == 0, result.output
    markdown = (out / "compare.md").read_text().split("## How episodes failed")[1]
    assert "### depth 1" in markdown and "### depth 2" in markdown
    assert "| refused get (craftable or unknown item) | 1 (100%) | 1 (100%) |" in markdown
