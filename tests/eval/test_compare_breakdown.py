"""`agenttrain compare` breaks success down by the environment's key (TextCraft: depth), so a
gain that comes from depth-1 goals alone is seen as such. Real evaluations of the oracle with
40 turns (solves everything) and with 5 (only the shallow goals)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from agenttrain.cli import app
from agenttrain.eval.compare import compare
from agenttrain.rollout.trajectory import read_jsonl, write_jsonl
from eval.test_compare import DEEP_AND_SHALLOW, WIDE, run_eval

runner = CliRunner()


@pytest.fixture(scope="module")
def oracles(tmp_path_factory):
    root = tmp_path_factory.mktemp("oracles")
    tasks = ["--model", "oracle", "--tasks", DEEP_AND_SHALLOW, "-n", "2"]
    run_eval(root / "turns40", *tasks, "--max-turns", "40")
    run_eval(root / "turns5", *tasks, "--max-turns", "5")
    return root


def test_success_is_counted_and_differenced_within_each_depth(oracles):
    comparison = compare([oracles / "turns40", oracles / "turns5"])
    view = comparison.breakdown
    assert view is not None and view.key == "depth" and len(view.groups) >= 2
    full, short = (run.label for run in comparison.runs)
    depths = {}
    for trajectory in comparison.runs[1].trajectories:
        depths.setdefault(str(trajectory.task_info["depth"]), []).append(trajectory.success)
    assert sorted(view.groups, key=int) == view.groups == sorted(depths, key=int)
    for group, successes in depths.items():
        assert view.solved[full][group] == (len(successes), len(successes))  # 40 turns: all
        assert view.solved[short][group] == (sum(successes), len(successes))
        delta = view.differences[short][group]
        # every task has 2 samples, so the paired estimate is the plain difference of rates
        assert delta.estimate == pytest.approx(sum(successes) / len(successes) - 1.0)
    shallow, deepest = view.groups[0], view.groups[-1]
    assert view.differences[short][shallow].estimate == 0.0
    assert view.differences[short][deepest].estimate < 0


def test_compare_shows_the_breakdown_in_the_terminal_and_in_compare_md(oracles, tmp_path):
    out = tmp_path / "cmp"
    arguments = ["compare", str(oracles / "turns40"), str(oracles / "turns5"), "--out", str(out)]
    result = runner.invoke(app, arguments, env=WIDE)
    assert result.exit_code == 0, result.output
    view = compare([oracles / "turns40", oracles / "turns5"]).breakdown
    assert "success by depth" in result.output and "Δ #2" in result.output
    markdown = (out / "compare.md").read_text()
    assert "## Success by depth" in markdown
    heads = " | ".join(f"depth {group}" for group in view.groups)
    assert f"| run | {heads} |" in markdown and f"| Δ success | {heads} |" in markdown
    solved, scored = view.solved["oracle (turns5)"][view.groups[-1]]
    assert f"| {solved}/{scored} |" in markdown.split("## Success by depth")[1]


def test_goals_of_one_depth_get_no_breakdown(tmp_path):
    """Nothing to break down: the section would repeat the headline."""
    for name in ("a", "b"):
        run_eval(tmp_path / name, "--model", "oracle", "--tasks", "0-1", "--max-turns", "40")
    assert compare([tmp_path / "a", tmp_path / "b"]).breakdown is None


def test_success_broken_down_by_two_attributes(oracles):
    """`--by depth,ingredients`: one group per pair of values, counted episode by episode."""
    comparison = compare([oracles / "turns40", oracles / "turns5"], by="depth,ingredients")
    view = comparison.breakdown
    assert view is not None and view.key == "depth,ingredients"
    short = comparison.runs[1]
    expected: dict[str, list[bool]] = {}
    for trajectory in short.trajectories:
        info = trajectory.task_info
        group = f"depth {info['depth']} · ingredients {info['ingredients']}"
        expected.setdefault(group, []).append(trajectory.success)
    assert set(view.groups) == set(expected) and len(view.groups) >= 3
    assert view.groups[0].startswith("depth 1 · ")  # numeric order, attribute by attribute
    for group, successes in expected.items():
        assert view.solved[short.label][group] == (sum(successes), len(successes))
    assert comparison.failures_by_group.keys() <= set(view.groups)


def test_by_fills_attributes_older_episodes_did_not_record(oracles, tmp_path):
    """Episodes written before TextCraft recorded `ingredients` get it from their first
    observation, and group exactly as new ones do."""
    older = []
    for name in ("turns40", "turns5"):
        episodes = list(read_jsonl(next((oracles / name).rglob("episodes.jsonl"))))
        for episode in episodes:
            episode.task_info.pop("ingredients")
        write_jsonl(tmp_path / f"{name}.jsonl", episodes)
        older.append(tmp_path / f"{name}.jsonl")
    new = compare([oracles / "turns40", oracles / "turns5"], by="ingredients").breakdown
    old = compare(older, by="ingredients").breakdown
    assert old is not None and new is not None
    assert old.groups == new.groups and list(old.solved.values()) == list(new.solved.values())


def test_by_an_attribute_the_episodes_lack_is_refused_with_those_they_have(oracles, tmp_path):
    arguments = ["compare", str(oracles / "turns40"), str(oracles / "turns5"), "--by", "colour"]
    result = runner.invoke(app, [*arguments, "--out", str(tmp_path / "cmp")], env=WIDE)
    assert result.exit_code == 2, result.output
    assert "--by colour" in result.output and "depth, goal, ingredients" in result.output
    assert not (tmp_path / "cmp").exists()


def test_compare_by_prints_and_writes_the_groups(oracles, tmp_path):
    out = tmp_path / "cmp"
    arguments = ["compare", str(oracles / "turns40"), str(oracles / "turns5")]
    by = ["--by", "depth,ingredients", "--out", str(out)]
    result = runner.invoke(app, [*arguments, *by], env=WIDE)
    assert result.exit_code == 0, result.output
    assert "success by depth and ingredients" in result.output
    markdown = (out / "compare.md").read_text()
    assert "## Success by depth and ingredients" in markdown
    assert "| run | depth 1 · ingredients 1 | " in markdown
