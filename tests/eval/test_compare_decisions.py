"""`agenttrain compare` on runs whose actions are JSON decisions (`{"work": 0.8, ...}`), from
hand-made episode files with known distributions."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from agenttrain.cli import app
from agenttrain.eval.compare import compare
from agenttrain.eval.decisions import kolmogorov_q, ks_test, parse_object
from agenttrain.rollout.trajectory import Trajectory, Turn, write_jsonl

runner = CliRunner()
WIDE = {"COLUMNS": "200"}
TASKS = 60


def decision_episode(model: str, task: int, reply: str, *, valid: bool = True) -> Trajectory:
    """A one-turn episode: the reply is the action when the format accepted it, else the
    environment was not stepped and the format rule scored -1."""
    turn = Turn(
        reply=reply,
        action=reply if valid else None,
        observation="ok" if valid else "Invalid format",
        reward=0.5 if valid else -1.0,
        done=True,
        format_error=not valid,
    )
    return Trajectory(
        episode_id=f"{model}-{task}",
        env="econ",
        task_id=task,
        group_id=str(task),
        sample=0,
        seed=0,
        model=model,
        turns=[turn],
        reward=turn.reward,
        success=valid,
        finish_reason="done" if valid else "format_error",
    )


def write_run(path, model, work, consumption, broken=()):
    episodes = [
        decision_episode(model, task, json.dumps({"work": w, "consumption": c, "note": "x"}))
        for task, (w, c) in enumerate(zip(work, consumption, strict=True))
    ]
    episodes += [
        decision_episode(model, len(episodes) + i, reply, valid=False)
        for i, reply in enumerate(broken)
    ]
    write_jsonl(path, episodes)
    return path


@pytest.fixture
def shifted_runs(tmp_path):
    """base: work ~ U(0.2, 0.6); trained: work ~ U(0.5, 0.9); consumption alike in both."""
    generator = np.random.default_rng(7)
    consumption = generator.uniform(0.3, 0.7, TASKS).round(3)
    base_work = generator.uniform(0.2, 0.6, TASKS).round(3)
    trained_work = generator.uniform(0.5, 0.9, TASKS).round(3)
    base = write_run(
        tmp_path / "base.jsonl",
        "base",
        base_work,
        consumption,
        broken=['{"work": 0.5,', 'I choose {"work": 1}', '{"work": NaN}', '{"work": 1.4}'],
    )
    trained = write_run(tmp_path / "trained.jsonl", "trained", trained_work, consumption[::-1])
    return base, trained, base_work, trained_work, consumption


def test_field_tables_hold_numpys_mean_and_std_and_flag_a_shifted_field(shifted_runs, tmp_path):
    base, trained, base_work, trained_work, _ = shifted_runs
    view = compare([base, trained]).decisions
    assert view is not None and view.fields == ["work", "consumption"]  # "note" is text
    # The rejected '{"work": 1.4}' reply is one JSON object: it counts, out of range or not.
    base_values = np.append(base_work, 1.4)
    work = view.stats["work"]
    assert work["base"].count == TASKS + 1
    assert work["base"].mean == pytest.approx(np.mean(base_values))
    assert work["base"].std == pytest.approx(np.std(base_values, ddof=1))
    assert work["trained"].mean == pytest.approx(np.mean(trained_work))
    assert work["trained"].std == pytest.approx(np.std(trained_work, ddof=1))
    assert work["trained"].quantiles[0.5] == pytest.approx(np.median(trained_work))
    assert view.tests["work"]["trained"].differs
    assert not view.tests["consumption"]["trained"].differs  # same values, other order

    base_run, trained_run = view.runs
    assert base_run.turns == TASKS + 4 and len(base_run.decisions) == TASKS + 1
    assert base_run.parse_rate == pytest.approx((TASKS + 1) / (TASKS + 4))
    assert base_run.minus_one_share == pytest.approx(4 / (TASKS + 4))
    assert base_run.mean_reward == pytest.approx((0.5 * TASKS - 4) / (TASKS + 4))
    assert (trained_run.parse_rate, trained_run.minus_one_share) == (1.0, 0.0)


def test_compare_command_prints_the_decisions_and_writes_a_plot_per_field(shifted_runs, tmp_path):
    base, trained, *_ = shifted_runs
    out = tmp_path / "cmp"
    result = runner.invoke(app, ["compare", str(base), str(trained), "--out", str(out)], env=WIDE)
    assert result.exit_code == 0, result.output
    assert "JSON decisions" in result.output and "decision fields" in result.output
    assert f"{(TASKS + 1) / (TASKS + 4):.3f}" in result.output  # base's JSON parse rate
    markdown = (out / "compare.md").read_text()
    assert "## JSON decisions" in markdown and "### `work`" in markdown
    for plot in ("field-1-work.png", "field-2-consumption.png"):
        assert f"]({plot})" in markdown and (out / plot).stat().st_size > 1000
    work_section = markdown.split("### `work`")[1].split("###")[0]
    trained_row = next(line for line in work_section.splitlines() if line.startswith("| trained"))
    assert trained_row.startswith("| trained | 60 |") and trained_row.endswith(" * |")  # flagged


def test_identical_runs_are_not_flagged(shifted_runs, tmp_path):
    base, *_ = shifted_runs
    copy = tmp_path / "again.jsonl"
    copy.write_text(base.read_text())
    view = compare([base, copy]).decisions
    for field in view.fields:
        (test,) = view.tests[field].values()
        assert test.statistic == 0.0 and test.p_value == 1.0 and not test.differs


def test_runs_without_json_actions_have_no_decisions_section(tmp_path):
    files = []
    for model in ("a", "b"):
        files.append(tmp_path / f"{model}.jsonl")
        write_jsonl(files[-1], [decision_episode(model, t, "get 3 wheat") for t in range(5)])
    out = tmp_path / "cmp"
    result = runner.invoke(app, ["compare", *map(str, files), "--out", str(out)], env=WIDE)
    assert result.exit_code == 0, result.output
    assert "JSON decisions" not in result.output
    assert "JSON decisions" not in (out / "compare.md").read_text()
    assert not list(out.glob("field-*.png"))


def test_a_run_that_never_wrote_json_gets_empty_fields_beside_one_that_did(shifted_runs, tmp_path):
    base, *_ = shifted_runs
    silent = tmp_path / "silent.jsonl"
    write_jsonl(
        silent, [decision_episode("silent", t, "no idea", valid=False) for t in range(TASKS)]
    )
    comparison = compare([base, silent])
    view = comparison.decisions
    assert view.runs[1].parse_rate == 0.0 and view.runs[1].minus_one_share == 1.0
    assert view.stats["work"]["silent"] is None and view.tests["work"]["silent"] is None
    result = runner.invoke(
        app, ["compare", str(base), str(silent), "--out", str(tmp_path / "c")], env=WIDE
    )
    assert result.exit_code == 0, result.output


def test_json_objects_only_and_no_nan():
    assert parse_object(' {"a": 1} ') == {"a": 1}
    for text in ('{"a": NaN}', '{"a": Infinity}', "[1, 2]", '```json\n{"a": 1}\n```', None):
        assert parse_object(text) is None


def test_kolmogorov_smirnov_statistic_and_p_value():
    first, other = np.array([1.0, 2.0, 3.0, 4.0]), np.array([3.5, 5.0, 6.0, 7.0])
    test = ks_test(first, other)
    assert test.statistic == 0.75  # F_first(3) = 0.75, F_other(3) = 0
    # Kolmogorov's distribution: P(K > 1.36) is about 0.05, P(K > 1.0) about 0.27.
    assert kolmogorov_q(1.3581) == pytest.approx(0.05, abs=1e-3)
    assert kolmogorov_q(1.0) == pytest.approx(0.2700, abs=1e-3)
    assert ks_test(first, np.array([])) is None


def test_stray_keys_of_malformed_replies_get_no_distribution(shifted_runs, tmp_path):
    """A reply like `{"work": 0.3, "tax_rate_1": 0.01}` is rejected by econ's schema; the field
    tables stay the schema's (work, consumption), as the econ environment declares them."""
    base, trained, *_ = shifted_runs
    stray = write_run(
        tmp_path / "stray.jsonl", "stray", [0.4], [0.2], broken=['{"work": 0.3, "tax_rate_1": 1}']
    )
    view = compare([base, trained, stray]).decisions
    assert view is not None and view.fields == ["work", "consumption"]
    assert view.stats["work"]["stray"].count == 2  # the rejected reply's work still counts
