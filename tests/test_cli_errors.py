"""Failures speak: every mistake a new user makes gets one line naming what to fix."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agenttrain.cli import app
from agenttrain.config import ConfigError, load
from agenttrain.envs import get_spec
from agenttrain.rl.config import TrainConfig

runner = CliRunner()
CONFIGS = Path(__file__).parents[1] / "configs"
WIDE = {"COLUMNS": "200"}


def one_line(output: str) -> str:
    return " ".join(output.split())


@pytest.mark.parametrize("command", ["train", "sft", "recipe"])
def test_a_yaml_syntax_error_names_the_file_line_and_column(tmp_path, command):
    bad = tmp_path / "bad.yaml"
    bad.write_text("run:\n  name: {x\n")
    result = runner.invoke(app, [command, str(bad)], env=WIDE)
    assert result.exit_code == 2, result.output
    assert f"error: {bad}:3:1: expected ',' or '}}'" in one_line(result.output)
    assert "Traceback" not in result.output


def test_the_yaml_position_points_at_the_problem(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("run:\n  name: x\n   out_dir: y\n")
    with pytest.raises(ConfigError, match=rf"^{bad}:3:11: mapping values are not allowed here"):
        load(TrainConfig, bad)


def test_an_unknown_split_is_named_without_stray_quotes(tmp_path):
    with pytest.raises(KeyError) as raised:
        get_spec("textcraft").split("tset")
    assert str(raised.value) == "textcraft has no split 'tset'; splits: train, val, test"
    result = runner.invoke(app, ["eval", "--split", "tset", "--out", str(tmp_path)], env=WIDE)
    assert result.exit_code == 2
    assert "error: textcraft has no split" in result.output
    assert '"' not in result.output


@pytest.mark.parametrize("command", ["train", "sft"])
@pytest.mark.parametrize("value", ["yes", "latest"])
def test_a_bad_resume_value_lists_the_allowed_ones(tmp_path, command, value):
    config = CONFIGS / ("largest_grpo.yaml" if command == "train" else "textcraft_sft.yaml")
    result = runner.invoke(
        app, [command, str(config), f"run.out_dir={tmp_path}", f"trainer.resume={value}"], env=WIDE
    )
    assert result.exit_code == 2, result.output
    assert "allowed values are auto, never, or a checkpoint folder" in one_line(result.output)


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        ("sft", "'data.train=[runs/demos/textcraft.jsonl]'"),
        ("sft", "'data.train=[demos.jsonl]'"),
        ("recipe", "'grpo.overrides=[trainer.total_steps=4]'"),
    ],
)
def test_help_examples_keep_their_brackets(command, shown):
    result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "250"})
    assert result.exit_code == 0
    assert shown in result.output


def test_the_next_step_hint_is_one_unbroken_command(tmp_path):
    out = tmp_path / "a-folder-with-a-long-name-for-demonstrations" / "demos.jsonl"
    result = runner.invoke(
        app, ["demos", "--tasks", "0-1", "--out", str(out)], env={"COLUMNS": "60"}
    )
    assert result.exit_code == 0, result.output
    hint = f"Next: agenttrain sft configs/textcraft_sft.yaml 'data.train=[{out}]'"
    assert hint in result.output.splitlines()


@pytest.mark.parametrize("command", ["train", "sft", "recipe"])
def test_a_config_that_is_not_utf8_or_is_a_folder_is_one_error_line(tmp_path, command):
    latin = tmp_path / "latin1.yaml"
    latin.write_bytes("run:\n  name: caf\xe9\n".encode("latin-1"))
    result = runner.invoke(app, [command, str(latin)], env=WIDE)
    assert result.exit_code == 2, result.output
    squeezed = "".join(result.output.split())  # the console may fold a long path anywhere
    assert f"error:{latin}:notUTF-8text(byte16:0xe9);saveitasUTF-8" in squeezed
    result = runner.invoke(app, [command, str(tmp_path)], env=WIDE)
    assert result.exit_code == 2, result.output
    assert f"error:{tmp_path}isafolder;givetheconfigfile" in "".join(result.output.split())


def test_a_run_folder_that_is_a_file_is_one_error_line(tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("not a folder")
    result = runner.invoke(
        app, ["train", str(CONFIGS / "largest_grpo.yaml"), f"run.out_dir={taken}"], env=WIDE
    )
    assert result.exit_code == 2, result.output
    squeezed = "".join(result.output.split())  # the console may fold a long path anywhere
    assert f"error:run.out_dir{taken}isafile,notafolder" in squeezed


def test_a_port_out_of_range_is_refused_before_binding():
    result = runner.invoke(app, ["serve", "textcraft", "--port", "99999"], env=WIDE)
    assert result.exit_code == 2
    assert "Invalid value for '--port'" in one_line(result.output)


def test_an_os_error_no_command_handles_is_one_error_line_not_a_traceback(tmp_path):
    """Through the real entry point (`python -m agenttrain`), as a user runs it; the path is
    longer than the terminal is wide and stays whole (copyable)."""
    import subprocess
    import sys

    blocked = tmp_path / ("a-folder-with-a-long-name-" * 4) / "blocked"
    blocked.parent.mkdir()
    blocked.write_text("a file where a folder should go")
    command = [sys.executable, "-m", "agenttrain", "eval", "--model", "oracle", "--tasks", "0"]
    done = subprocess.run(
        [*command, "--out", str(blocked / "eval")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "80"},
    )
    output = one_line(done.stdout + done.stderr)
    assert done.returncode == 1, output
    assert f"error: Not a directory: {blocked / 'eval'}" in output
    assert "Traceback" not in output


def test_demos_refuse_an_unwritable_output_before_playing(tmp_path):
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where a folder should go")
    for out, message in (
        (
            blocked / "demos.jsonl",
            f"error: cannot write {blocked / 'demos.jsonl'}: {blocked} is a file, not a folder",
        ),
        (tmp_path, f"error: --out {tmp_path} is a folder; give a .jsonl file"),
    ):
        args = ["demos", "--env", "textcraft", "--tasks", "0-3", "--out", str(out)]
        result = runner.invoke(app, args, env=WIDE)
        assert result.exit_code == 2, result.output
        squeezed = "".join(result.output.split())  # the console may fold a long path anywhere
        assert "".join(message.split()) in squeezed
        assert "oracle" not in result.output  # not one episode was played


@pytest.mark.slow  # over 9 s on 2 cores: the full suite only
def test_an_unreachable_memory_url_is_one_error_line_before_training(tmp_path):
    """Issue 28: it surfaced as a traceback only after the first step's rollouts; then, as
    one line, followed by aiohttp's "Unclosed client session" warning (a real process)."""
    import subprocess
    import sys

    args = [f"run.out_dir={tmp_path / 'run'}", "memory.enabled=true"]
    args.append("memory.url=http://127.0.0.1:9")  # nobody listens there
    command = [sys.executable, "-m", "agenttrain", "train", str(CONFIGS / "largest_grpo.yaml")]
    done = subprocess.run([*command, *args], capture_output=True, text=True, timeout=300)
    output = one_line(done.stdout + done.stderr)
    assert done.returncode == 2, output
    assert "error: memory.url http://127.0.0.1:9 cannot be reached" in output
    assert "Unclosed" not in output and "Traceback" not in output
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
