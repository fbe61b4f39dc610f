"""`agenttrain compare` on evaluations written by the real `agenttrain eval` (TextCraft
in-process: the oracle, and the tiny random model for a second model in one evaluation)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agenttrain.cli import app
from agenttrain.eval.compare import CompareError, compare

runner = CliRunner()
WIDE = {"COLUMNS": "200"}

DEEP_AND_SHALLOW = "0-3,95-99"
"""Test positions 0-3 take the oracle 2-3 turns, 95-99 more than 5."""


def run_eval(out, *args):
    result = runner.invoke(app, ["eval", *args, "--out", str(out)], env=WIDE)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def evals(tmp_path_factory, tiny_model_dir):
    """Three real evaluations: the oracle with 40 and with 5 turns, and one evaluation of
    the tiny model then the oracle."""
    root = tmp_path_factory.mktemp("evals")
    tasks = ["--tasks", DEEP_AND_SHALLOW, "-n", "2"]
    run_eval(root / "turns40", "--model", "oracle", "--max-turns", "40", *tasks)
    run_eval(root / "turns5", "--model", "oracle", "--max-turns", "5", *tasks)
    both = run_eval(
        root / "both",
        *("--model", str(tiny_model_dir), "--model", "oracle", "--tasks", "0-3"),
        *("--max-turns", "5", "--max-new-tokens", "8"),
    )
    return root, both


def test_eval_of_several_models_reports_each_ones_difference_to_the_first(evals):
    root, output = evals
    summaries = json.loads((root / "both" / "summary.json").read_text())
    tiny, oracle = summaries  # in the order they were evaluated
    assert summaries[tiny]["success_rate"] == 0.0 and summaries[oracle]["success_rate"] == 1.0
    assert summaries[oracle]["success_rate_ci"] == [1.0, 1.0]
    difference = summaries[oracle]["difference_to_first"]
    assert difference["baseline"] == tiny
    assert difference["success_rate"] == {
        "estimate": 1.0,
        "low": 1.0,
        "high": 1.0,
        "tasks": 4,
        "excludes_zero": True,
    }
    assert "difference_to_first" not in summaries[tiny]
    assert "+1.000 [+1.00, +1.00] *" in output and "Δ vs first" in output
    report = (root / "both" / "report.md").read_text()
    assert "## Differences to " in report and "| oracle | 4 | +1.000 [+1.00, +1.00] * |" in report


def test_compare_two_evaluations_end_to_end(evals, tmp_path):
    root, _ = evals
    out = tmp_path / "cmp"
    result = runner.invoke(
        app, ["compare", str(root / "turns40"), str(root / "turns5"), "--out", str(out)], env=WIDE
    )
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "oracle (turns40)" in text and "oracle (turns5)" in text  # same model: by folder
    assert "1.000 [1.00, 1.00]" in text  # 40 turns solve every task
    shorter = compare([root / "turns40", root / "turns5"])
    worse = shorter.differences["oracle (turns5)"]["success_rate"]
    assert worse.estimate < 0 and worse.tasks == 9 == shorter.shared_tasks["oracle (turns5)"]
    markdown = (out / "compare.md").read_text()
    assert "## Differences to oracle (turns40)" in markdown
    assert f"| oracle (turns5) | 9 | {worse.estimate:+.3f} [" in markdown
    for title in ("parse rate", "format-error episodes", "mean turns", "env errors"):
        assert title in markdown
    assert (out / "compare.png").stat().st_size > 1000


def test_a_folder_of_several_models_keeps_the_evaluation_order(evals, tiny_model_dir):
    root, _ = evals
    comparison = compare([root / "both"])  # sorted by name, oracle would come first
    assert [run.label for run in comparison.runs] == [str(tiny_model_dir), "oracle"]
    assert comparison.differences["oracle"]["parse_rate"].estimate > 0  # tiny: format errors


def test_a_model_folder_and_an_episodes_file_are_evaluations_too(evals):
    root, _ = evals
    comparison = compare([root / "turns40" / "oracle", root / "turns5/oracle/episodes.jsonl"])
    assert len(comparison.runs) == 2 and comparison.shared_tasks["oracle (turns5)"] == 9


def test_a_path_that_is_not_an_evaluation_is_refused_by_name(evals, tmp_path):
    root, _ = evals
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.jsonl").write_text('{"hello": 1}\n')
    for bad in (tmp_path / "empty", tmp_path / "notes.jsonl", tmp_path / "missing"):
        result = runner.invoke(app, ["compare", str(root / "turns40"), str(bad)], env=WIDE)
        assert result.exit_code == 2, result.output
        text = " ".join(result.output.split())
        assert str(bad) in text and "expected an `agenttrain eval` output folder" in text


def test_evaluations_without_a_shared_task_are_refused(evals, tmp_path):
    root, _ = evals
    run_eval(tmp_path / "other", "--model", "oracle", "--tasks", "50-51")
    result = runner.invoke(
        app, ["compare", str(root / "turns40"), str(tmp_path / "other"), "--out", "x"], env=WIDE
    )
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert "oracle (other) shares no task with oracle (turns40)" in text
    assert not (tmp_path / "x").exists()


def test_one_run_alone_is_nothing_to_compare(evals):
    root, _ = evals
    with pytest.raises(CompareError, match="compare needs two or more"):
        compare([root / "turns40"])


def test_evaluations_joined_by_plus_are_one_pooled_run(evals, tmp_path):
    """Seeds of one arm pooled: each task's samples from every evaluation together, so the
    pooled difference is the mean of the members' (same tasks, same samples per task)."""
    root, _ = evals
    alone = compare([root / "turns40", root / "turns5"])
    pooled_path = Path(f"{root / 'turns5'}+{root / 'turns40' / 'oracle'}")
    comparison = compare([root / "turns40", root / "turns5", pooled_path])
    label = "pooled: turns5+turns40"
    pooled = next(run for run in comparison.runs if run.label == label)
    assert len(pooled.trajectories) == 2 * len(alone.runs[1].trajectories)
    worse = alone.differences["oracle (turns5)"]["success_rate"].estimate
    half = comparison.differences[label]["success_rate"]
    assert half.estimate == pytest.approx(worse / 2) and half.tasks == 9
    result = runner.invoke(
        app,
        ["compare", str(root / "turns40"), str(pooled_path), "--out", str(tmp_path / "cmp")],
        env=WIDE,
    )
    assert result.exit_code == 0, result.output
    assert label in " ".join(result.output.split())


def test_pooled_recipe_evaluations_are_named_by_what_differs(evals, tmp_path):
    """A recipe writes every evaluation to <recipe>/eval/<model>: pooled seeds of a recipe
    are named by their differing part, not "eval+eval" (which named every pool alike)."""
    root, _ = evals
    for seed, source in (("seed0", "turns5"), ("seed1", "turns40")):
        shutil.copytree(root / source, tmp_path / seed / "eval")
    members = [tmp_path / seed / "eval" / "oracle" for seed in ("seed0", "seed1")]
    comparison = compare([root / "turns40", Path("+".join(map(str, members)))])
    expected = f"pooled: {tmp_path}/{{seed0,seed1}}/eval/oracle/episodes.jsonl"
    assert comparison.runs[1].label == expected


def test_pooling_refuses_other_tasks_and_folders_of_several_models(evals, tmp_path):
    root, _ = evals
    run_eval(tmp_path / "fewer", "--model", "oracle", "--tasks", "0-3", "-n", "2")
    with pytest.raises(CompareError, match="pooled evaluations must cover the same tasks"):
        compare([root / "turns40", Path(f"{root / 'turns5'}+{tmp_path / 'fewer'}")])
    with pytest.raises(CompareError, match="holds 2 models; pool one model's evaluations"):
        compare([root / "turns40", Path(f"{root / 'turns5'}+{root / 'both'}")])
