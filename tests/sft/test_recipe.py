"""`agenttrain recipe` end to end on the tiny model: every stage, the comparison, the re-run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM
from typer.testing import CliRunner

from agenttrain.cli import app
from agenttrain.envs import get_spec
from agenttrain.eval.runner import select_tasks, slug
from agenttrain.policy.models import load_hf, resolve
from agenttrain.run.stages import StageChanged

runner = CliRunner()
TINY_GRPO = (
    "grpo.overrides=[trainer.total_steps=1,data.batch_tasks=1,data.group_size=2,"
    "rollout.max_turns=2,rollout.max_new_tokens=8,trainer.test_freq=0,"
    "'trainer.loggers=[jsonl]']"
)
"""One GRPO step of groups of 2, two turns of 8 tokens: a recipe's GRPO stage in seconds."""


@pytest.mark.slow  # over 9 s on 2 cores: the full suite only
def test_the_recipe_runs_every_stage_and_compares_them(tiny_model_dir, tmp_path):
    out = tmp_path / "recipe"
    arguments = [
        "recipe",
        "configs/textcraft_recipe.yaml",
        f"run.out_dir={out}",
        "demos.tasks=[0,1,2,3,4,5]",
        "eval.tasks=0-1",
        "eval.n=2",
        "eval.base_n=1",  # the base model fails on format: fewer samples for it
        "eval.max_turns=2",
        "eval.max_new_tokens=8",
        "sft.overrides=[eval.after_training=false,"
        f"model.path={tiny_model_dir},optim.batch_tokens=2048,'trainer.loggers=[jsonl]']",
        TINY_GRPO,
    ]
    result = runner.invoke(app, arguments, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    results = json.loads((out / "results.json").read_text())
    assert list(results["summaries"]) == ["base", "SFT", "SFT+GRPO"]
    # the demonstrations' replies do not fit in the 8 tokens the later stages generate
    assert "trained replies are longer than the 8 tokens" in " ".join(result.output.split())
    assert results["models"]["SFT"].startswith(str(out / "sft" / "checkpoints"))
    assert results["models"]["SFT+GRPO"].startswith(str(out / "grpo" / "checkpoints"))
    episodes = {label: s["episodes"] for label, s in results["summaries"].items()}
    assert episodes == {"base": 2, "SFT": 4, "SFT+GRPO": 4}
    report = (out / "report.md").read_text()
    assert "| base |" in report and "| SFT+GRPO |" in report
    # where GRPO's signal came from, step by step (issue 26)
    assert "| step | generation rounds |" in report and "| informative share |" in report
    assert "| episodes trained on |" in report and "in 1 steps;" in report
    assert (out / "comparison.png").exists() and (out / "eval" / "report.md").exists()
    # memory: the process's peak when each stage ended, never falling (the recipe's 18.9 GB)
    peaks = list(results["peak_memory_gb"].values())
    assert list(results["peak_memory_gb"]) == ["demos", "SFT", "GRPO", "eval"]
    assert 0 < peaks[0] <= peaks[1] <= peaks[2] <= peaks[3]
    assert "| peak memory so far (GB) |" in report
    # each stage's paired gain over the one before, over the 2 shared tasks, and compare.md
    gains = results["paired_gains"]
    assert list(gains) == ["SFT - base", "SFT+GRPO - SFT"]
    assert all(g["tasks"] == 2 and g["low"] <= g["estimate"] <= g["high"] for g in gains.values())
    rates = {label: s["success_rate"] for label, s in results["summaries"].items()}
    assert gains["SFT+GRPO - SFT"]["estimate"] == pytest.approx(rates["SFT+GRPO"] - rates["SFT"])
    assert "- SFT+GRPO - SFT: " in report and "over 2 tasks" in report
    compare_md = (out / "compare" / "compare.md").read_text()
    assert f"Baseline: {results['models']['base']}" in compare_md
    # GRPO started from the SFT adapter
    grpo_config = (out / "grpo" / "config.yaml").read_text()
    assert f"path: {results['models']['SFT']}" in grpo_config

    # its checkpoint is the SFT adapter trained further, on the same root model (not stacked)
    sft, grpo = resolve(results["models"]["SFT"]), resolve(results["models"]["SFT+GRPO"])
    assert grpo.base == sft.base == tiny_model_dir
    model, _ = load_hf(grpo)
    assert list(model.peft_config) == ["default"]
    by_hand = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(tiny_model_dir), grpo.path
    )
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    assert torch.allclose(model(ids).logits, by_hand(ids).logits, atol=1e-5)

    first_times = results["timings_all_runs_s"]
    assert list(first_times) == ["demos", "SFT", "GRPO", "eval"]
    again = runner.invoke(app, arguments, env={"COLUMNS": "200"})
    assert again.exit_code == 0, again.output
    # the rerun reuses every stage, and its report still says what the stages cost
    times = json.loads((out / "results.json").read_text())["timings_all_runs_s"]
    assert all(times[stage] >= first_times[stage] > 0 for stage in first_times)
    assert "| wall time, all runs (min) | this run (min) |" in (out / "report.md").read_text()
    assert "SFT already finished" in again.output and "GRPO already finished" in again.output
    assert "already evaluated" in again.output
    recorded = (out / "results.json").read_text()
    resolved = (out / "recipe.yaml").read_text()

    # A rerun with other settings never reuses (and reports) a stage that ran with the old
    # ones: it names the changed keys and the folders to remove (issue 28).
    for extra, changed, folders in (
        (["sft.overrides=[optim.lr=1e-5]"], "sft.optim.lr 0.001 -> 1e-05", "sft and"),
        (["grpo.overrides=[actor.lr=1e-6]"], "grpo.actor.lr", "grpo and"),
        (["eval.temperature=0.1"], "eval.temperature 0.6 -> 0.1", "eval"),
    ):
        refused = runner.invoke(app, [*arguments, *extra], env={"COLUMNS": "400"})
        output = " ".join(refused.output.split())
        assert refused.exit_code == 2, refused.output
        assert changed in output and "ran with other settings" in output, output
        assert f"Remove {out}/{folders}" in output
    assert (out / "results.json").read_text() == recorded  # nothing was touched
    assert json.loads((out / "stage_times.json").read_text()) == times
    assert (out / "recipe.yaml").read_text() == resolved  # it said the refused settings ran


def test_an_unreadable_override_value_is_a_config_error():
    result = runner.invoke(
        app,
        ["recipe", "configs/textcraft_recipe.yaml", "sft.overrides=[a=[b]"],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 2
    assert "override 'sft.overrides': cannot read" in result.output


def test_the_recipes_evaluations_play_eval_concurrency_episodes_at_once(tmp_path):
    from agenttrain.recipe import Recipe, load_recipe

    path = Path("configs/textcraft_recipe.yaml")
    default = Recipe(load_recipe(path, [f"run.out_dir={tmp_path}"]))
    assert default.eval_config(["m"]).rollout.max_in_flight == 32  # agenttrain eval's default
    wider = Recipe(load_recipe(path, [f"run.out_dir={tmp_path}", "eval.concurrency=96"]))
    assert wider.eval_config(["m"]).rollout.max_in_flight == 96


def test_a_command_line_stage_override_list_adds_to_the_recipes_own():
    from agenttrain.recipe import load_recipe

    recipe = load_recipe(
        Path("configs/textcraft_recipe.yaml"),
        ["eval.n=4", "grpo.overrides=[trainer.total_steps=16,data.group_size=4]"],
    )
    overrides = recipe.grpo.overrides
    assert "trainer.total_steps=16" in overrides and "trainer.total_steps=6" not in overrides
    assert "data.group_size=4" in overrides and "data.group_size=8" not in overrides
    # the recipe's other GRPO settings stay (the README's example used to drop them all)
    assert "sampling.temperature=0.6" in overrides
    assert "algorithm.filter_groups.enabled=true" in overrides
    assert recipe.sft.overrides == ["eval.after_training=false"]


def _tiny_recipe(out: Path, model: str, grpo: str = "") -> list[str]:
    """`agenttrain recipe` on the tiny model: one GRPO step, 2-turn 8-token episodes; `grpo`:
    more GRPO overrides (comma-separated)."""
    return [
        "recipe",
        "configs/textcraft_recipe.yaml",
        f"run.out_dir={out}",
        "demos.tasks=[0,1,2,3,4,5]",
        "eval.tasks=0-1",
        "eval.n=1",
        "eval.max_turns=2",
        "eval.max_new_tokens=8",
        # one process: the recipe's default two are tested end to end above; here they would
        # only add two interpreter starts per evaluation (48 -> 25 s for the continuation test)
        "eval.workers=1",
        "sft.overrides=[eval.after_training=false,"
        f"model.path={model},optim.batch_tokens=2048,'trainer.loggers=[jsonl]']",
        "grpo.overrides=[trainer.total_steps=1,data.batch_tasks=1,data.group_size=2,"
        "rollout.max_turns=2,rollout.max_new_tokens=8,trainer.test_freq=0,"
        f"{grpo + ',' if grpo else ''}'trainer.loggers=[jsonl]']",
    ]


def _rft_recipe(out: Path, model: str) -> list[str]:
    return [
        *_tiny_recipe(out, model),
        "rft.enabled=true",
        "rft.max_turns=10",  # the oracle needs more than 2 turns for most goals
        "rft.max_new_tokens=8",
    ]


@pytest.mark.slow  # over 9 s on 2 cores: the full suite only
def test_the_rft_baseline_trains_on_own_successes_and_grpo_is_compared_to_it(
    tiny_model_dir, tmp_path, monkeypatch
):
    """Fixture: the tiny random model never solves a task, so its sampling pass is stood in
    for by the oracle playing the same tasks (real solved episodes, written by the real
    `write_demos`). Everything after it runs for real."""
    from agenttrain.sft import demos

    real = demos.write_demos
    sampled = []

    def oracle_for_the_model(config, out, console=None):
        if config.models != ["oracle"]:
            sampled.append(config)
            config = config.model_copy(update={"models": ["oracle"]})
        return real(config, out, console)

    monkeypatch.setattr(demos, "write_demos", oracle_for_the_model)
    out = tmp_path / "recipe"
    arguments = _rft_recipe(out, tiny_model_dir)
    result = runner.invoke(app, arguments, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    results = json.loads((out / "results.json").read_text())
    # the SFT model sampled the tasks GRPO played, as many times each as GRPO's group size
    (sampling,) = sampled
    assert sampling.models == [results["models"]["SFT"]]
    grpo_tasks = {
        json.loads(line)["task_id"]
        for path in (out / "grpo" / "trajectories").glob("*.jsonl")
        for line in path.read_text().splitlines()
    }
    train = select_tasks("textcraft", "train", None)
    assert sampling.split == "train" and sampling.n == 2
    assert {train[position] for position in sampling.tasks} == grpo_tasks
    counts = json.loads((out / "rft" / "sampling.json").read_text())
    assert counts["episodes"] == 2 * len(grpo_tasks) and counts["kept"] > 0
    # fine-tuned from the SFT checkpoint on those episodes, then evaluated beside the others
    assert list(results["summaries"]) == ["base", "SFT", "SFT+RFT", "SFT+GRPO"]
    rft_config = (out / "rft" / "sft" / "config.yaml").read_text()
    assert f"path: {results['models']['SFT']}" in rft_config
    assert str(out / "rft" / "own.jsonl") in rft_config
    rft, sft = resolve(results["models"]["SFT+RFT"]), resolve(results["models"]["SFT"])
    assert rft.base == sft.base == tiny_model_dir
    assert list(results["paired_gains"]) == [
        "SFT - base",
        "SFT+GRPO - SFT",
        "SFT+RFT - SFT",
        "SFT+GRPO - SFT+RFT",
    ]
    report = (out / "report.md").read_text()
    assert "| SFT+RFT |" in report and "- SFT+GRPO - SFT+RFT: " in report
    assert "## RFT baseline" in report and f"solved {counts['kept']};" in report
    assert "| RFT |" in report

    first_times = results["timings_all_runs_s"]
    assert list(first_times) == ["demos", "SFT", "GRPO", "RFT", "eval"]
    again = runner.invoke(app, arguments, env={"COLUMNS": "200"})
    assert again.exit_code == 0, again.output
    # the rerun reuses every stage, and its report still says what the stages cost
    times = json.loads((out / "results.json").read_text())["timings_all_runs_s"]
    assert all(times[stage] >= first_times[stage] > 0 for stage in first_times)
    assert "| wall time, all runs (min) | this run (min) |" in (out / "report.md").read_text()
    assert "using the RFT samples" in again.output and "RFT already finished" in again.output
    assert len(sampled) == 1
    refused = runner.invoke(app, [*arguments, "rft.n=3"], env={"COLUMNS": "400"})
    assert refused.exit_code == 2
    assert "rft.n 2 -> 3" in " ".join(refused.output.split()), refused.output


def test_an_sft_model_that_solves_nothing_gives_no_rft_model(tiny_model_dir, tmp_path):
    from agenttrain.recipe import Recipe, load_recipe

    out = tmp_path / "recipe"
    overrides = [*_rft_recipe(out, tiny_model_dir)[2:], "rft.tasks=6-9", "rft.n=2"]
    recipe = Recipe(load_recipe(Path("configs/textcraft_recipe.yaml"), overrides))
    assert recipe.train_rft(str(tiny_model_dir)) is None  # the random model solves nothing
    assert json.loads((out / "rft" / "sampling.json").read_text()) == {"episodes": 8, "kept": 0}
    section = " ".join(recipe.rft_section())
    assert "solved 0" in section and "no RFT model" in section
    assert not (out / "rft" / "sft").exists()


def test_rft_without_tasks_of_its_own_or_grpo_trajectories_says_what_to_set(tmp_path):
    from agenttrain.recipe import Recipe, load_recipe

    recipe = Recipe(
        load_recipe(
            Path("configs/textcraft_recipe.yaml"),
            [
                f"run.out_dir={tmp_path}",
                "rft.enabled=true",
                "grpo.overrides=[trainer.save_trajectories=false]",
            ],
        )
    )
    with pytest.raises(ValueError, match=r"kept no trajectories .* set rft\.tasks"):
        recipe.rft_tasks()


def test_the_demos_stage_rewrites_a_share_with_recoveries_and_records_it(tmp_path):
    from agenttrain.recipe import Recipe, load_recipe

    def demos_stage(*recovery: str) -> Recipe:
        overrides = [f"run.out_dir={tmp_path}", "demos.tasks=[0,1,2,3,4,5]", *recovery]
        return Recipe(load_recipe(Path("configs/textcraft_recipe.yaml"), overrides))

    path = demos_stage("demos.recovery=1", "demos.recovery_style=inventory").make_demos()
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert sum("turns" not in record for record in records) >= 5  # chat records: rewritten
    assert any(m.get("loss") is False for r in records for m in r["messages"])
    checks = [m for r in records for m in r["messages"] if m["content"].endswith("\ninventory")]
    assert len(checks) >= 5  # the style reached the rewrite
    for other in (["demos.recovery=0"], ["demos.recovery=1"]):  # another run, each
        with pytest.raises(StageChanged):
            demos_stage(*other).make_demos()


def test_the_demos_stage_writes_the_refused_gets_it_is_given_and_records_it(tmp_path):
    from agenttrain.recipe import Recipe, load_recipe

    def demos_stage(recovery_from: str) -> Recipe:
        overrides = [f"run.out_dir={tmp_path}", "demos.tasks=[0,1,2,3]", "demos.recovery=1"]
        overrides.append(f"demos.recovery_from={recovery_from}")
        return Recipe(load_recipe(Path("configs/textcraft_recipe.yaml"), overrides))

    path = demos_stage("get").make_demos()
    records = [json.loads(line) for line in path.read_text().splitlines()]
    fetched = [m for r in records for m in r["messages"] if "cannot be fetched" in m["content"]]
    assert len(records) == len(fetched) == 4
    with pytest.raises(StageChanged):
        demos_stage("craft").make_demos()


def test_recoveries_for_an_env_without_them_are_refused_when_the_recipe_loads():
    from agenttrain.recipe import load_recipe

    with pytest.raises(ValueError, match="--recovery exists for textcraft only, not 'babyai'"):
        load_recipe(
            Path("configs/textcraft_recipe.yaml"), ["demos.env=babyai", "demos.recovery=0.5"]
        )


def test_screening_plays_the_tasks_grpo_can_draw_by_default():
    from agenttrain.recipe import Recipe, load_recipe

    def recipe(*overrides: str) -> Recipe:
        return Recipe(load_recipe(Path("configs/textcraft_recipe.yaml"), list(overrides)))

    train = select_tasks("textcraft", "train", None)
    depth_one = recipe("screen.enabled=true", "grpo.overrides=['env.task_strata=[depth 1]']")
    positions = depth_one.screen_tasks()
    played = {train[p] for p in positions}
    stratum = get_spec("textcraft").task_stratum
    assert played == {task for task in train if stratum(task) == "depth 1"}
    assert 0 < len(positions) < len(train)
    assert recipe("screen.enabled=true", "screen.tasks=3-5").screen_tasks() == [3, 4, 5]
    assert recipe("screen.enabled=true", "screen.tasks=7").screen_tasks() == [7]


def test_screen_keep_mixed_reaches_grpo_and_needs_several_samples(tmp_path):
    from agenttrain.recipe import Recipe, load_recipe

    recipe_file = Path("configs/textcraft_recipe.yaml")
    keep = ["screen.enabled=true", "screen.n=4", "screen.keep=mixed"]
    stage = Recipe(load_recipe(recipe_file, keep)).grpo_stage_config("sft", tmp_path / "e.jsonl")
    assert stage.data.frontier.keep == "mixed"
    assert stage.data.frontier.seed_from == [tmp_path / "e.jsonl"]
    for overrides, fragment in (
        (["screen.enabled=true", "screen.keep=mixed"], "set screen.n=4"),
        (["screen.n=4", "screen.keep=mixed"], "set screen.enabled=true"),
    ):
        with pytest.raises(ValueError, match=fragment):
            load_recipe(recipe_file, overrides)


def test_the_report_says_how_many_tasks_screen_keep_mixed_left(tmp_path):
    from agenttrain.recipe import Recipe, load_recipe

    out = tmp_path / "recipe"
    screening = ["eval", "--env", "textcraft", "--split", "train", "--tasks", "0-2"]
    screening += ["--model", "oracle", "-n", "2", "--out", str(out / "screen")]
    result = runner.invoke(app, screening)
    assert result.exit_code == 0, result.output
    (file,) = (out / "screen").glob("*/episodes.jsonl")
    rows = [json.loads(line) for line in file.read_text().splitlines()]
    rows[0]["success"], rows[0]["reward"] = False, 0.0  # one task solved once of twice
    file.write_text("".join(json.dumps(row) + "\n" for row in rows))
    keep = ["screen.enabled=true", "screen.n=2", "screen.keep=mixed", f"run.out_dir={out}"]
    recipe = Recipe(load_recipe(Path("configs/textcraft_recipe.yaml"), keep))
    section = " ".join(recipe.screening_section())
    assert "drew only the 1 of 3 tasks screening both solved and failed" in section


@pytest.mark.slow  # over 9 s on 2 cores: the full suite only
def test_screening_feeds_grpos_frontier_sampling_and_is_reused_only_unchanged(
    tiny_model_dir, tmp_path
):
    out = tmp_path / "recipe"
    arguments = [
        *_tiny_recipe(out, tiny_model_dir, grpo="sampling.temperature=0.9"),
        "eval.tasks=0",
        "screen.enabled=true",
        "screen.tasks=0-2",
    ]
    result = runner.invoke(app, arguments, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    results = json.loads((out / "results.json").read_text())
    (folder,) = (path.parent for path in (out / "screen").glob("*/episodes.jsonl"))
    settings = json.loads((folder / "settings.json").read_text())
    # the SFT model, on GRPO's training split, as GRPO samples (temperature, turns, tokens)
    assert settings["model"] == results["models"]["SFT"]
    assert settings["split"] == "train" and settings["tasks"] == [0, 1, 2]
    assert settings["temperature"] == 0.9
    assert settings["rollout"]["max_turns"] == 2 and settings["rollout"]["max_new_tokens"] == 8
    grpo = (out / "grpo" / "config.yaml").read_text()
    assert "task_sampling: frontier" in grpo and str(folder / "episodes.jsonl") in grpo
    (step,) = [
        json.loads(line)
        for line in (out / "grpo" / "metrics.jsonl").read_text().splitlines()
        if "rollout/episodes" in line
    ]
    assert step["sampling/tasks_with_stats"] >= 3  # the screened tasks were known at step 1
    report = (out / "report.md").read_text()
    assert "## Screening" in report and "played 3 episodes of 3 train tasks" in report
    assert "| screening |" in report

    first_times = results["timings_all_runs_s"]
    assert list(first_times) == ["demos", "SFT", "screening", "GRPO", "eval"]
    again = runner.invoke(app, arguments, env={"COLUMNS": "200"})
    assert again.exit_code == 0, again.output
    # the rerun reuses every stage, and its report still says what the stages cost
    times = json.loads((out / "results.json").read_text())["timings_all_runs_s"]
    assert all(times[stage] >= first_times[stage] > 0 for stage in first_times)
    assert "| wall time, all runs (min) | this run (min) |" in (out / "report.md").read_text()
    assert "using the screening episodes" in again.output
    refused = runner.invoke(app, [*arguments, "screen.n=2"], env={"COLUMNS": "400"})
    assert refused.exit_code == 2
    assert "n 1 -> 2" in " ".join(refused.output.split()), refused.output


@pytest.mark.slow  # over 9 s on 2 cores: the full suite only
def test_more_grpo_steps_continue_the_finished_stage_and_evaluate_its_new_checkpoint(
    tiny_model_dir, tmp_path
):
    """ "Enough steps" is the same command with a larger trainer.total_steps: GRPO resumes
    from its last checkpoint (SFT is not redone), the new checkpoint is evaluated, and the
    record says 2 steps; fewer steps than ran is refused like any other change."""
    out = tmp_path / "recipe"
    first = runner.invoke(app, _tiny_recipe(out, tiny_model_dir), env={"COLUMNS": "200"})
    assert first.exit_code == 0, first.output
    longer = _tiny_recipe(out, tiny_model_dir, grpo="trainer.total_steps=2")
    result = runner.invoke(app, longer, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())
    assert "SFT already finished" in output
    assert "GRPO finished 1 steps; continuing to 2" in output
    steps = [
        json.loads(line)["step"]
        for line in (out / "grpo" / "metrics.jsonl").read_text().splitlines()
        if "rollout/episodes" in line
    ]
    assert steps == [1, 2]  # step 1 was not played again
    results = json.loads((out / "results.json").read_text())
    assert results["models"]["SFT+GRPO"].endswith("step-2")
    assert (out / "eval" / slug(results["models"]["SFT+GRPO"]) / "summary.json").exists()
    recorded = json.loads((out / "stages.json").read_text())
    assert recorded["GRPO"]["grpo"]["trainer"]["total_steps"] == 2

    shorter = runner.invoke(app, _tiny_recipe(out, tiny_model_dir), env={"COLUMNS": "400"})
    assert shorter.exit_code == 2
    assert "total_steps 2 -> 1" in " ".join(shorter.output.split()), shorter.output


@pytest.mark.slow  # two recipe processes
def test_ctrl_c_in_the_recipes_evaluation_keeps_its_episodes_without_a_traceback(
    tiny_model_dir, tmp_path
):
    """Ctrl-C while the recipe evaluates: the episodes that finished are kept, the message
    says to run the same command again (no traceback), and that command finishes the rest."""
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "recipe"
    command = [
        sys.executable, "-m", "agenttrain", "recipe", "configs/textcraft_recipe.yaml",
        f"run.out_dir={out}", "demos.tasks=[0,1,2,3]", "eval.tasks=0-39", "eval.n=1",
        "eval.max_turns=4", "eval.max_new_tokens=16",
        "sft.overrides=[eval.after_training=false,"
        f"model.path={tiny_model_dir},optim.batch_tokens=2048,'trainer.loggers=[jsonl]']",
        TINY_GRPO,
    ]  # fmt: skip
    environment = {**os.environ, "COLUMNS": "300"}
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment
    )
    deadline = time.monotonic() + 400
    while not any(len(p.read_text().splitlines()) >= 3 for p in out.glob("eval/*/*.partial.jsonl")):
        assert process.poll() is None, process.stdout.read()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    output = " ".join(process.communicate(timeout=120)[0].split())
    assert process.returncode == 130, output
    assert "finished episodes are kept in" in output and "run the same command again" in output
    assert "Traceback" not in output and "EvalStopped" not in output
    again = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    results = json.loads((out / "results.json").read_text())
    assert {label: s["episodes"] for label, s in results["summaries"].items()} == {
        "base": 40,
        "SFT": 40,
        "SFT+GRPO": 40,
    }


FREED_HEAP = """
from agenttrain.run.runtime import release_freed_memory
def resident_mb():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) // 1024
chunks = [bytearray(64 * 1024) for _ in range(6000)]  # ~390 MB of heap, below mmap's threshold
last = bytearray(64 * 1024)  # allocated after them: the heap's top stays in use
del chunks
before = resident_mb()
release_freed_memory()
print(before, resident_mb())
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads Linux's /proc")
def test_memory_a_stage_freed_goes_back_to_the_system_before_the_next():
    """glibc keeps freed heap memory for reuse: in a TextCraft recipe run 4.3 of 6.2 GB
    resident after SFT were such, and GRPO started on top of them (make demo peaked at 18.9 GB)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", FREED_HEAP], capture_output=True, text=True, check=True
    )
    before, after = map(int, done.stdout.split())
    assert before - after > 300, (before, after)


def test_an_sft_stage_recorded_before_data_repeat_existed_is_still_reused(tmp_path):
    """A new SFT setting at its default is what older runs ran with: their recorded SFT
    stage still matches (a continued recipe must not be refused), the setting itself not."""
    from agenttrain.recipe import Recipe, load_recipe

    def recipe(*overrides: str) -> Recipe:
        config = [f"run.out_dir={tmp_path}", *overrides]
        return Recipe(load_recipe(Path("configs/textcraft_recipe.yaml"), config))

    settings = recipe().stage_settings("SFT")
    assert "repeat" not in settings["sft"]["data"]  # no record yet: the default is left out
    assert not {"stop_patience", "stop_min_delta"} & set(settings["sft"]["trainer"])
    old = json.loads(json.dumps(settings))
    recipe().records.record("SFT", old)
    folder = tmp_path / "sft"
    assert recipe().records.check("SFT", recipe().stage_settings("SFT"), folder)
    repeated = recipe("sft.overrides=[data.repeat.where=depth=1]")
    with pytest.raises(StageChanged, match=r"new: sft\.data\.repeat"):
        repeated.records.check("SFT", repeated.stage_settings("SFT"), folder)


def test_a_grpo_stage_recorded_before_replay_and_the_demo_loss_existed_is_still_reused(tmp_path):
    """Rerunning a finished recipe (`make demo` twice) must not refuse its GRPO stage because
    a GRPO setting was added since, at the default it ran with."""
    from agenttrain.recipe import Recipe, load_recipe

    def grpo_settings(*overrides: str) -> tuple[Recipe, dict]:
        recipe = Recipe(
            load_recipe(
                Path("configs/textcraft_recipe.yaml"), [f"run.out_dir={tmp_path}", *overrides]
            )
        )
        own = recipe.grpo_stage_config("runs/sft/checkpoints/step-19").model_dump(mode="json")
        return recipe, recipe.stage_settings("GRPO", own)

    recipe, settings = grpo_settings()
    assert "replay" not in settings["grpo"]["data"]["frontier"]  # no record: default left out
    assert "demo_loss" not in settings["grpo"]["actor"]
    recipe.records.record("GRPO", settings)  # as a recipe recorded before replay existed
    again, settings = grpo_settings()
    assert again.records.check("GRPO", settings, tmp_path / "grpo")
    replaying, settings = grpo_settings(
        "grpo.overrides=[data.task_sampling=frontier,data.frontier.replay=2]"
    )
    with pytest.raises(StageChanged, match=r"data\.frontier\.replay"):
        replaying.records.check("GRPO", settings, tmp_path / "grpo")
    anchored, settings = grpo_settings(
        'grpo.overrides=[actor.demo_loss.coef=0.5,"actor.demo_loss.data=[demos.jsonl]"]'
    )
    with pytest.raises(StageChanged, match=r"actor\.demo_loss"):
        anchored.records.check("GRPO", settings, tmp_path / "grpo")


def test_a_demo_loss_in_the_grpo_overrides_trains_on_the_recipes_own_sft_sample(tmp_path):
    """`actor.demo_loss.coef=...` alone in a recipe: its demonstrations file and its SFT's
    `data.limit`, so the anchor is exactly what the SFT stage trained on; named data wins."""
    from agenttrain.recipe import Recipe, load_recipe

    def demo_loss(*overrides: str):
        config = [f"run.out_dir={tmp_path}", *overrides]
        return Recipe(load_recipe(Path("configs/textcraft_recipe.yaml"), config)).grpo_config

    anchored = demo_loss("grpo.overrides=[actor.demo_loss.coef=0.5]").actor.demo_loss
    assert anchored.data == [tmp_path / "demos.jsonl"]
    assert anchored.limit == 160
    assert demo_loss().actor.demo_loss.data == []  # off: nothing added to the stage's settings
    named = demo_loss(
        'grpo.overrides=[actor.demo_loss.coef=0.5,"actor.demo_loss.data=[mine.jsonl]"]'
    ).actor.demo_loss
    assert named.data == [Path("mine.jsonl")]


@pytest.mark.slow  # a recipe without SFT on the tiny model: about 20 s on 2 cores
def test_a_recipe_branches_from_a_given_sft_checkpoint_without_training_one(
    tiny_model_dir, tmp_path
):
    """`sft.checkpoint`: GRPO arms start from one SFT in folders of their own; the checkpoint
    is the SFT stage's record, so a rerun from another one reuses nothing."""
    import shutil

    out = tmp_path / "branch"
    arguments = [
        "recipe",
        "configs/textcraft_recipe.yaml",
        f"run.out_dir={out}",
        f"sft.checkpoint={tiny_model_dir}",
        "demos.tasks=[0,1,2]",
        "eval.tasks=0-1",
        "eval.n=1",
        "eval.max_turns=2",
        "eval.max_new_tokens=8",
        f"sft.overrides=[model.path={tiny_model_dir}]",
        TINY_GRPO,
    ]
    result = runner.invoke(app, arguments, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "no SFT trained here" in result.output and not (out / "sft").exists()
    results = json.loads((out / "results.json").read_text())
    assert results["models"]["SFT"] == str(tiny_model_dir)
    assert f"path: {tiny_model_dir}" in (out / "grpo" / "config.yaml").read_text()
    assert f"from `{tiny_model_dir}` (sft.checkpoint)" in (out / "report.md").read_text()

    other = tmp_path / "other-sft"
    shutil.copytree(tiny_model_dir, other)
    moved = [
        a.replace(f"sft.checkpoint={tiny_model_dir}", f"sft.checkpoint={other}") for a in arguments
    ]
    refused = runner.invoke(app, moved, env={"COLUMNS": "400"})
    output = " ".join(refused.output.split())
    assert refused.exit_code == 2 and "ran with other settings" in output, refused.output
    assert "checkpoint" in output and f"Remove {out}/grpo and {out}/eval to run" in output
    shutil.rmtree(out / "grpo")
    shutil.rmtree(out / "eval")
    again = runner.invoke(app, moved, env={"COLUMNS": "200"})
    assert again.exit_code == 0, again.output
    assert json.loads((out / "results.json").read_text())["models"]["SFT"] == str(other)

    missing = runner.invoke(
        app,
        [
            "recipe",
            "configs/textcraft_recipe.yaml",
            f"run.out_dir={tmp_path / 'new'}",
            f"sft.checkpoint={tmp_path / 'nowhere'}",
        ],
        env={"COLUMNS": "200"},
    )
    assert missing.exit_code == 2 and "nowhere" in missing.output, missing.output
    assert not (tmp_path / "new").exists()  # refused before anything was written
