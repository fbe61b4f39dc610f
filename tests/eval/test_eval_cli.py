"""`agenttrain eval` and `agenttrain show` as a user runs them (oracle: fast and exact)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from agenttrain.cli import app
from agenttrain.eval.resume import ModelFolder
from agenttrain.eval.runner import expand_models, format_ranges, parse_ranges, select_tasks

runner = CliRunner()


def test_task_selection_and_ranges():
    assert parse_ranges("0-3,7, 9-10") == [0, 1, 2, 3, 7, 9, 10]
    assert format_ranges([9, 0, 1, 2, 3, 7, 10]) == "0-3,7,9-10"
    for bad in ("abc", "5-2", "-3", "1-x"):
        with pytest.raises(ValueError, match="is not a number or a range"):
            parse_ranges(bad)
    test = select_tasks("textcraft", "test", None)
    assert len(test) == 100
    assert select_tasks("textcraft", "test", [0, 1]) == test[:2]
    assert select_tasks("textcraft", "all", [5]) == [5]
    with pytest.raises(ValueError, match="outside the test split"):
        select_tasks("textcraft", "test", [100])


def test_a_folder_of_checkpoints_expands_to_each_and_a_run_to_its_last(tmp_path):
    for step in (10, 2):
        folder = tmp_path / "checkpoints" / f"step-{step}"
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
    assert expand_models([str(tmp_path / "checkpoints")]) == [
        str(tmp_path / "checkpoints" / "step-2"),
        str(tmp_path / "checkpoints" / "step-10"),
    ]
    # issue 28: a run folder (what the run's report suggests) is the model the run ended with
    assert expand_models([str(tmp_path)]) == [str(tmp_path / "checkpoints" / "step-10")]


def test_eval_writes_summary_episodes_and_a_report_with_plots(tmp_path):
    out = tmp_path / "eval"
    result = runner.invoke(
        app,
        [
            "eval",
            "--model",
            "oracle",
            "--tasks",
            "0-3,97-99",
            "-n",
            "2",
            "--seeds",
            "0,1",
            "--max-turns",
            "40",
            "--out",
            str(out),
        ],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())["oracle"]
    assert summary["episodes"] == 7 * 2 * 2
    assert summary["success_rate"] == 1.0 and summary["pass@4"] == 1.0
    assert set(summary["by_depth"]) == {"1", "4"}
    report = (out / "report.md").read_text()
    assert "| oracle |" in report and "success_by_depth.png" in report
    for plot in ("success_by_depth.png", "distributions.png"):
        assert (out / plot).stat().st_size > 1000
    lines = (out / "oracle" / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == 28

    shown = runner.invoke(
        app,
        ["show", str(out / "oracle" / "episodes.jsonl"), "--index", "5"],
        env={"COLUMNS": "200"},
    )
    assert shown.exit_code == 0
    assert "success" in shown.output and "final observation · reward 1" in shown.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--format", "xml"], "'--format': Value error, 'xml' is not one of 'react', 'adapt'"),
        (["--backend", "foo"], "'--backend': Value error, 'foo' is not one of 'hf', 'vllm'"),
        (["--tasks", "abc"], "--tasks: 'abc' is not a number or a range low-high"),
        (["--seeds", "0,x"], "--seeds: 'x' is not a number or a range low-high"),
        (["--tasks", "0-500"], "--tasks positions 100-500 are outside the test split (0-99)"),
        (["--split", "dev"], "textcraft has no split 'dev'"),
        (["--model", "no-such-model"], "unknown model 'no-such-model'"),
    ],
)
def test_bad_eval_options_are_clear_errors(tmp_path, args, message):
    result = runner.invoke(app, ["eval", *args, "--out", str(tmp_path)], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


def test_show_rejects_a_missing_file_and_a_bad_index(tmp_path):
    assert runner.invoke(app, ["show", str(tmp_path / "nope.jsonl")]).exit_code == 2
    (tmp_path / "one.jsonl").write_text("")
    assert runner.invoke(app, ["show", str(tmp_path / "one.jsonl"), "--index", "3"]).exit_code == 2


def test_the_terminal_table_shows_every_header_whole_in_80_columns():
    from io import StringIO
    from pathlib import Path

    from rich.console import Console

    from agenttrain.cli import SUMMARY_TITLES, _summary_table
    from agenttrain.eval.runner import ModelResult

    summary = {
        "success_rate": 0.5,
        "success_rate_all": 0.25,
        "mean_turns": 7.5,
        "format_error_rate": 0.012,
        "env_errors": 3,
        "agent_errors": 2,
        "tokens_per_s": 1234.5,
        "tasks": 40,
        **{f"pass@{k}": 0.5 for k in (1, 2, 4, 8)},
        "avg@8": 0.5,
    }
    model = "runs/textcraft-recipe/grpo/checkpoints/step-8"
    out = StringIO()
    Console(file=out, width=80).print(
        _summary_table([ModelResult(model, summary, Path("e.jsonl"), 1.0)])
    )
    text = out.getvalue()
    assert "…" not in text
    for title in [*SUMMARY_TITLES.values(), "pass@1", "pass@8"]:
        assert title in text


def test_a_failed_eval_leaves_no_empty_run_folder(tmp_path):
    out = tmp_path / "eval"
    dead = "http://127.0.0.1:1/v1"  # nothing listens on port 1
    args = ["--model", "openai:some-model", "--openai-base-url", dead, "--tasks", "0"]
    result = runner.invoke(
        app,
        ["eval", *args, "--out", str(out)],
        env={"COLUMNS": "200", "OPENAI_API_KEY": "unused"},
    )
    assert result.exit_code == 2, result.output
    assert "unreachable" in result.output
    assert not out.exists()


def test_a_stopped_eval_keeps_a_random_sample_of_tasks_not_the_first_ones(tmp_path, monkeypatch):
    """TextCraft's test split is sorted by crafting depth: played in order, an evaluation
    stopped early would have kept only depth-1 episodes (and read far too high)."""
    kept: list[int] = []
    keep = ModelFolder.append

    def record(folder, trajectory):
        kept.append(trajectory.task_info["depth"])
        keep(folder, trajectory)

    monkeypatch.setattr(ModelFolder, "append", record)
    out = tmp_path / "eval"
    args = ["eval", "--model", "oracle", "--tasks", "0-99", "--concurrency", "4"]
    result = runner.invoke(app, [*args, "--max-turns", "40", "--out", str(out)])
    assert result.exit_code == 0, result.output
    first_quarter = kept[:25]
    assert sum(depth >= 2 for depth in first_quarter) >= 10, first_quarter
    episodes = [json.loads(line) for line in (out / "oracle" / "episodes.jsonl").open()]
    assert [e["task_id"] for e in episodes] == select_tasks("textcraft", "test", None)


def test_draft_tokens_reach_the_decoder_and_do_not_split_an_evaluation(
    tiny_model_dir, tmp_path, monkeypatch
):
    """`--draft-tokens` sets the decoder's guesses; guesses change speed, not what is
    sampled, so an evaluation continued with another value keeps the episodes it played."""
    from agenttrain.policy import hf

    built = []
    init = hf.HFPolicy.__init__

    def recording(self, *args, **kwargs):
        init(self, *args, **kwargs)
        built.append(self.decoder.draft_tokens)

    monkeypatch.setattr(hf.HFPolicy, "__init__", recording)
    out = tmp_path / "eval"
    common = ["eval", "--model", str(tiny_model_dir), "--max-turns", "1", "--max-new-tokens", "4"]
    first = runner.invoke(
        app, [*common, "--tasks", "0-1", "--draft-tokens", "0", "--out", str(out)]
    )
    assert first.exit_code == 0, first.output
    second = runner.invoke(
        app, [*common, "--tasks", "0-2", "--draft-tokens", "3", "--out", str(out)]
    )
    assert second.exit_code == 0, second.output
    assert "2 episodes already played, 1 to go" in " ".join(second.output.split())
    third = runner.invoke(app, [*common, "--tasks", "3", "--out", str(tmp_path / "other")])
    assert third.exit_code == 0, third.output
    assert built == [0, 3, 6]  # the CPU (arena) path's default: 6
