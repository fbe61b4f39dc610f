"""Frontier task sampling: tasks whose estimated success is neither 0 nor 1 are drawn more
often, unseen tasks still come up, uniform mode is the old stream, and resume is exact."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from agenttrain.config import ConfigError, load
from agenttrain.envs.largest import SPEC as LARGEST
from agenttrain.rl.config import EnvConfig, FrontierConfig, TrainConfig
from agenttrain.rl.environments import RunEnvironments, Slot
from agenttrain.rl.task_stats import TaskRecord, TaskStats, pick_frontier
from agenttrain.rl.trainer import Trainer
from rl.tiny_runs import RECIPE, recipe, train

SETTINGS = FrontierConfig(candidates=3, prior_strength=2.0, floor=0.02)


def environments(*configs: EnvConfig, seed: int = 0) -> RunEnvironments:
    return RunEnvironments.build(
        list(configs), seed=seed, val_tasks=1, validate=False, default_turns=None, timeout_s=10
    )


def picked_tasks(
    candidates: list[int],
    stats: TaskStats,
    draws: int,
    settings: FrontierConfig = SETTINGS,
    env: str = "largest",
    stratum=None,
) -> Counter[int]:
    """How often each candidate task is picked over `draws` seeded slots."""
    return Counter(
        pick_frontier(
            [Slot(index, env, task) for task in candidates], stats, settings, 0, stratum
        ).slot.task
        for index in range(draws)
    )


def test_a_task_solved_half_the_time_is_picked_far_more_than_one_always_solved_or_failed():
    half, never, always = 1, 2, 3
    stats = TaskStats(
        {
            ("largest", half): TaskRecord(successes=16, episodes=32),
            ("largest", never): TaskRecord(successes=0, episodes=32),
            ("largest", always): TaskRecord(successes=32, episodes=32),
        }
    )
    counts = picked_tasks([half, never, always], stats, draws=3000)
    assert counts[half] > 4 * counts[never] and counts[half] > 4 * counts[always]
    assert counts[never] > 0 and counts[always] > 0  # the floor: nothing starves
    assert picked_tasks([half, never, always], stats, draws=3000) == counts  # seeded


def test_unseen_tasks_get_the_prior_and_are_still_drawn():
    stats = TaskStats({("largest", task): TaskRecord(0, 8) for task in range(10)})
    stats.records[("largest", 10)] = TaskRecord(8, 8)  # the run solves 8 of 88 episodes
    prior = stats.success_rate()
    assert stats.estimate(("largest", 99), prior, 2.0) == prior
    counts = picked_tasks([0, 99, 1], stats, draws=2000)  # beside two tasks never solved
    assert counts[99] > 2 * counts[0] and counts[99] > 2 * counts[1]
    unseen = pick_frontier([Slot(0, "largest", 99)], stats, SETTINGS, seed=0)
    assert unseen.unseen and not pick_frontier([Slot(0, "largest", 0)], stats, SETTINGS, 0).unseen


def test_each_pass_of_candidates_offers_every_task_once():
    stream = environments(EnvConfig(name="largest", split="val"))
    windows = [stream.candidates(index, 4) for index in range(25)]  # 25 slots × 4 = 100 tasks
    offered = [slot.task for window in windows for slot in window]
    assert sorted(offered) == sorted(LARGEST.split("val"))
    assert all(slot.index == index for index, w in enumerate(windows) for slot in w)
    following = [slot.task for index in range(25, 50) for slot in stream.candidates(index, 4)]
    assert sorted(following) == sorted(offered) and following != offered  # a new shuffle


def test_candidates_keep_the_environment_mix():
    stream = environments(
        EnvConfig(name="largest", weight=2), EnvConfig(name="textcraft", weight=1)
    )
    for index in range(30):
        window = stream.candidates(index, 4)
        assert {slot.env for slot in window} == {stream.slot(index).env}


def test_uniform_sampling_is_the_shuffled_stream_as_before(tiny_model_dir, tmp_path):
    trainer = Trainer(recipe(tiny_model_dir, tmp_path / "run", "env.split=val"))
    order = list(LARGEST.split("val"))
    random.Random("0/epoch/0").shuffle(order)  # the documented rule: seed/epoch/<n>
    assert [slot.task for slot in trainer.take_tasks(100)] == order

    mixed = environments(
        EnvConfig(name="largest", weight=2), EnvConfig(name="textcraft", weight=1), seed=3
    )
    slots = [mixed.slot(index) for index in range(30)]
    for name, weight in (("largest", 2), ("textcraft", 1)):
        order = list(mixed[name].train_tasks)
        random.Random(f"3/{name}/epoch/0").shuffle(order)
        assert [s.task for s in slots if s.env == name] == order[: 10 * weight]


def step_tasks(run: Path, step: int) -> list[tuple[str, int]]:
    lines = (run / "trajectories" / f"step-{step:06d}.jsonl").read_text().splitlines()
    return [(row["group_id"], row["task_id"]) for row in map(json.loads, lines)]


FRONTIER = (
    "data.task_sampling=frontier",
    "data.batch_tasks=2",
    "algorithm.filter_groups.enabled=true",
    "algorithm.filter_groups.max_num_gen_batches=3",
    "sampling.temperature=2.0",
    "trainer.test_freq=0",
    "trainer.save_freq=1",
)


@pytest.mark.slow  # over 9 s on 2 cores: the full suite only
def test_a_resumed_frontier_run_draws_the_same_tasks_as_an_uninterrupted_one(
    tiny_model_dir, tmp_path
):
    replay = (*FRONTIER, "data.frontier.replay=2")  # replay reads the restored counts too
    whole = train(recipe(tiny_model_dir, tmp_path / "whole", "trainer.total_steps=4", *replay))
    train(recipe(tiny_model_dir, tmp_path / "split", "trainer.total_steps=2", *replay))
    resumed = train(recipe(tiny_model_dir, tmp_path / "split", "trainer.total_steps=4", *replay))
    for step in (3, 4):
        assert step_tasks(tmp_path / "split", step) == step_tasks(tmp_path / "whole", step)
    keys = ("sampling/priority_mean", "sampling/replay_share", "sampling/tasks_with_stats")
    for key in (*keys, "train/num_gen_batches"):
        assert resumed[-1][key] == whole[-1][key]


def test_a_frontier_step_logs_its_sampling_and_informative_share(tiny_model_dir, tmp_path):
    rows = train(recipe(tiny_model_dir, tmp_path / "run", "trainer.total_steps=2", *FRONTIER))
    for row in rows:
        played = row["train/num_gen_batches"] * 2
        assert row["rollout/informative_group_share"] == row["rollout/informative_groups"] / played
        assert row["sampling/tasks_with_stats"] > 0
        assert row["sampling/priority_mean"] >= SETTINGS.floor
    assert rows[0]["sampling/unseen_share"] == 1.0  # the first round knows no task yet
    assert not any("sampling/replay_share" in row for row in rows)  # replay is off
    state = json.dumps(
        Trainer(recipe(tiny_model_dir, tmp_path / "run", *FRONTIER)).task_stats.state()
    )
    assert json.loads(state)  # the counts came back from the checkpoint
    assert "rollout/informative_group_share" in (tmp_path / "run" / "report.md").read_text()


def test_a_uniform_step_logs_the_informative_share_and_no_sampling_metrics(
    tiny_model_dir, tmp_path
):
    rows = train(recipe(tiny_model_dir, tmp_path / "run", "trainer.test_freq=0"))
    for row in rows:
        assert row["rollout/informative_group_share"] == row["rollout/informative_groups"] / 4
        assert 0 <= row["rollout/success_mixed_group_share"] <= 1
        assert not any(key.startswith("sampling/") for key in row)


@pytest.mark.parametrize(
    ("overrides", "fragments"),
    [
        (
            ["data.task_sampling=prioritized"],
            ["data.task_sampling", "'uniform'", "'frontier'", "(got 'prioritized')"],
        ),
        (["data.frontier.candidates=1"], ["data.frontier.candidates", "(got 1)"]),
        (["data.frontier.floor=0"], ["data.frontier.floor", "greater than 0"]),
        (["data.frontier.candidate=3"], ["unknown key 'data.frontier.candidate'", "candidates"]),
        (
            ["data.frontier.candidates=8"],
            ["data.task_sampling is uniform", "data.task_sampling=frontier"],
        ),
        (
            ["data.task_sampling=frontier", "data.frontier.rescreen_every=5"],
            ["data.frontier.rescreen_every", "keep is all", "set keep=mixed"],
        ),
        (
            ["data.task_sampling=frontier", "data.frontier.rescreen_samples=1"],
            ["data.frontier.rescreen_samples", "greater than or equal to 2"],
        ),
    ],
)
def test_bad_frontier_settings_are_named(overrides, fragments):
    with pytest.raises(ConfigError) as caught:
        load(TrainConfig, RECIPE, overrides)
    for fragment in fragments:
        assert fragment in str(caught.value)


def test_an_unseen_task_starts_from_its_difficulty_class_rate():
    """Tasks rarely repeat in a short run; their classes do. After depth-1 tasks were often
    solved and depth-3 tasks never, an unseen depth-1 task is picked over an unseen depth-3 one."""
    depth = {1: "d1", 2: "d1", 3: "d3", 4: "d3", 10: "d1", 30: "d3"}
    stats = TaskStats(
        {
            ("textcraft", 1): TaskRecord(4, 8),
            ("textcraft", 2): TaskRecord(4, 8),
            ("textcraft", 3): TaskRecord(0, 8),
            ("textcraft", 4): TaskRecord(0, 8),
        }
    )
    settings = FrontierConfig(candidates=2)
    chosen = picked_tasks([30, 10], stats, 400, settings, "textcraft", lambda key: depth[key[1]])
    assert chosen[10] > 4 * chosen[30]
    flat = picked_tasks([30, 10], stats, 400, settings, "textcraft")
    assert abs(flat[10] - flat[30]) < 80  # without classes both are just "unseen"


def test_textcraft_tasks_are_classed_by_crafting_depth():
    from agenttrain.envs import get_spec

    spec = get_spec("textcraft")
    test = spec.split("test")
    assert spec.task_stratum(test[0]) == "depth 1"
    assert spec.task_stratum(test[-1]) == "depth 4"


SIGNAL = FrontierConfig(candidates=2, target="signal")


def test_the_signal_target_prefers_tasks_whose_groups_differed_where_success_sees_no_difference():
    """With partial credit a goal never solved can still give groups whose rewards differ;
    success counts call it hopeless, group counts see its signal."""
    signal, flat = 1, 2
    stats = TaskStats(
        {
            ("textcraft", signal): TaskRecord(successes=0, episodes=32, groups=4, informative=3),
            ("textcraft", flat): TaskRecord(successes=0, episodes=32, groups=4, informative=0),
        }
    )

    by_signal = picked_tasks([signal, flat], stats, 600, SIGNAL, "textcraft")
    assert by_signal[signal] > 4 * by_signal[flat] and by_signal[flat] > 0
    by_success = picked_tasks([signal, flat], stats, 600, FrontierConfig(candidates=2), "textcraft")
    assert abs(by_success[signal] - by_success[flat]) < 100  # both look equally hopeless


def test_the_signal_target_pools_unseen_tasks_by_their_class_signal_rate():
    depth = {1: "d2", 2: "d2", 3: "d3", 4: "d3", 20: "d2", 30: "d3"}
    stats = TaskStats()
    stats.record_groups([(("textcraft", 1), True), (("textcraft", 2), True)])
    stats.record_groups([(("textcraft", 3), False), (("textcraft", 4), False)] * 2)
    assert stats.rate("signal") == 2 / 6 and stats.success_rate() == 0.5  # no episodes counted
    chosen = picked_tasks([30, 20], stats, 400, SIGNAL, "textcraft", lambda key: depth[key[1]])
    assert chosen[20] > 3 * chosen[30]


def test_replay_brings_back_a_known_mixed_task_the_stream_no_longer_offers():
    """A run shorter than a pass over the split meets each task once in the stream; replay
    offers the best known tasks beside each slot's window, the mixed one first."""
    mixed, solved, failed = 1, 2, 3
    stats = TaskStats(
        {
            ("largest", mixed): TaskRecord(successes=4, episodes=8),
            ("largest", solved): TaskRecord(successes=8, episodes=8),
            ("largest", failed): TaskRecord(successes=0, episodes=8),
        }
    )
    unseen = [50, 51, 52]  # the stream's window: tasks never played
    assert mixed not in picked_tasks(unseen, stats, 500)
    replay = FrontierConfig(candidates=3, replay=1)
    counts = picked_tasks(unseen, stats, 500, replay)
    assert counts[mixed] > 50 and counts[solved] == counts[failed] == 0  # only the best is offered
    pick = pick_frontier(
        [Slot(0, "largest", task) for task in unseen],
        stats,
        replay,
        seed=0,
        played={("largest", mixed)},
    )
    assert pick.slot.task != mixed  # a task already played in the step is not replayed


def test_a_replaying_run_plays_a_known_task_at_most_once_a_step(tiny_model_dir, tmp_path):
    trainer = Trainer(
        recipe(
            tiny_model_dir,
            tmp_path / "run",
            "data.task_sampling=frontier",
            "data.frontier.replay=2",
        )
    )
    mixed = {("largest", task): TaskRecord(successes=4, episodes=8) for task in (5, 6)}
    failed = {("largest", task): TaskRecord(successes=0, episodes=8) for task in range(900, 920)}
    trainer.task_stats = TaskStats(mixed | failed)  # unseen tasks: the run's low rate
    first = trainer._draw(20)
    tasks = [pick.slot.task for pick in first]
    assert {5, 6} <= set(tasks) and tasks.count(5) == tasks.count(6) == 1
    replayed = {("largest", pick.slot.task) for pick in first if pick.replayed}
    assert {("largest", 5), ("largest", 6)} <= replayed <= set(trainer.task_stats.records)
    refill = trainer._draw(20, first)  # the step's next round: both were played already
    assert not {5, 6} & {pick.slot.task for pick in refill}
    assert 5 in {pick.slot.task for pick in trainer._draw(20)}  # a new step: back again


def test_a_replaying_run_reports_its_replayed_picks_step_by_step(tiny_model_dir, tmp_path):
    replay = (*FRONTIER, "data.frontier.replay=2")
    rows = train(recipe(tiny_model_dir, tmp_path / "run", "trainer.total_steps=2", *replay))
    assert rows[0]["sampling/replay_share"] == 0.0  # step 1 knows only its own tasks
    assert all(0 <= row["sampling/replay_share"] <= 1 for row in rows)
    report = (tmp_path / "run" / "report.md").read_text()
    assert "picks replayed" in report and "picks never played before" in report


def test_task_counts_survive_a_checkpoint_and_old_checkpoints_still_load():
    stats = TaskStats({("textcraft", 7): TaskRecord(3, 16, groups=2, informative=1)})
    assert TaskStats.from_state(stats.state()) == stats
    old = TaskStats.from_state([["textcraft", 7, 3, 16]])  # written before group counts
    assert old.records[("textcraft", 7)] == TaskRecord(3, 16, groups=0, informative=0)


def test_a_signal_frontier_run_counts_every_played_group(tiny_model_dir, tmp_path):
    signal = (*FRONTIER, "data.frontier.target=signal")
    rows = train(recipe(tiny_model_dir, tmp_path / "run", "trainer.total_steps=2", *signal))
    stats = Trainer(recipe(tiny_model_dir, tmp_path / "run", *signal)).task_stats
    records = stats.records.values()
    assert sum(r.groups for r in records) == sum(row["rollout/played_groups"] for row in rows)
    assert sum(r.informative for r in records) == sum(
        row["rollout/informative_groups"] for row in rows
    )
    assert rows[-1]["sampling/prior_signal"] == stats.rate("signal")


def screening_eval(out: Path, model, split: str, *extra: str) -> Path:
    """The starting model's episodes on `split` by the real `agenttrain eval` (2 samples)."""
    from typer.testing import CliRunner

    from agenttrain.cli import app

    arguments = ["eval", "--env", "largest", "--split", split, "--model", str(model), "-n", "2"]
    arguments += ["--max-new-tokens", "8", "--out", str(out), *extra]
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 0, result.output
    return next(out.glob("*/episodes.jsonl"))


SCREENED = ("env.split=val", *FRONTIER)


def test_screened_episodes_are_the_task_counts_step_1_picks_by(tiny_model_dir, tmp_path):
    """`data.frontier.seed_from`: the starting model's episodes on the training tasks count
    before step 1, so its first round already knows every task it looks at."""
    from agenttrain.rollout.trajectory import read_jsonl

    file = screening_eval(tmp_path / "screen", tiny_model_dir, "val")
    episodes = list(read_jsonl(file))
    config = recipe(
        tiny_model_dir, tmp_path / "run", *SCREENED, f"data.frontier.seed_from=[{file}]"
    )
    stats = Trainer(config).task_stats
    assert len(stats) == len({t.task_id for t in episodes}) == 100
    for task in (episodes[0].task_id, episodes[-1].task_id):
        mine = [t for t in episodes if t.task_id == task]
        record = stats.records[("largest", task)]
        assert (record.successes, record.episodes) == (sum(t.success for t in mine), 2)
        assert (record.groups, record.informative) == (1, int(len({t.reward for t in mine}) > 1))
    rows = train(config)
    assert rows[0]["sampling/unseen_share"] == 0.0  # without screening: 1.0 (see above)
    resumed = Trainer(
        recipe(
            tiny_model_dir,
            tmp_path / "run",
            *SCREENED,
            "trainer.total_steps=3",
            f"data.frontier.seed_from=[{file}]",
        )
    )
    played = sum(r.episodes for r in resumed.task_stats.records.values()) - len(episodes)
    assert played == sum(row["rollout/episodes"] for row in rows)  # screened once, not twice


def test_screening_episodes_of_other_tasks_or_missing_files_are_refused(tiny_model_dir, tmp_path):
    test_split = screening_eval(tmp_path / "test", tiny_model_dir, "test", "--tasks", "0-1")
    for file, fragments in (
        (test_split, ["data.frontier.seed_from", "not in the run's training split"]),
        (tmp_path / "nowhere.jsonl", ["data.frontier.seed_from", "nowhere.jsonl", "does not"]),
    ):
        config = recipe(
            tiny_model_dir, tmp_path / "run", *SCREENED, f"data.frontier.seed_from=[{file}]"
        )
        with pytest.raises((ValueError, FileNotFoundError)) as caught:
            Trainer(config)
        for fragment in fragments:
            assert fragment in str(caught.value)


def test_screened_tasks_the_run_never_draws_are_left_out(tiny_model_dir, tmp_path):
    """A screening of the whole split serves a run on some of its strata: the other tasks'
    episodes are left out (counted in the message), not refused and not pooled in."""
    from typer.testing import CliRunner

    from agenttrain.cli import app
    from agenttrain.envs.registry import get_spec
    from agenttrain.rollout.trajectory import read_jsonl

    out = tmp_path / "screen"
    arguments = ["eval", "--split", "train", "--tasks", "0-3,100-103", "--model", "oracle"]
    result = CliRunner().invoke(app, [*arguments, "--out", str(out)])
    assert result.exit_code == 0, result.output
    file = next(out.glob("*/episodes.jsonl"))
    config = recipe(
        tiny_model_dir,
        tmp_path / "run",
        "env.name=textcraft",
        "env.task_strata=[depth 1]",
        "rollout.action_format=react",
        *FRONTIER,
        f"data.frontier.seed_from=[{file}]",
    )
    stats = Trainer(config).task_stats
    depth = get_spec("textcraft").task_stratum
    played = {t.task_id: depth(t.task_id) for t in read_jsonl(file)}
    assert {"depth 1"} < set(played.values())  # the screening saw deeper goals too
    assert {task for _, task in stats.records} == {
        task for task, stratum in played.items() if stratum == "depth 1"
    }


def screening_with_mixed(file: Path, mixed: set[int]) -> Path:
    """`file`'s episodes rescored: in the tasks of `mixed` the first sample succeeds and the
    rest fail; every other task fails in all its samples."""
    rows = [json.loads(line) for line in file.read_text().splitlines()]
    for row in rows:
        won = row["task_id"] in mixed and row["sample"] == 0
        row["success"], row["reward"] = won, float(won)
    out = file.with_name("rescored.jsonl")
    out.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return out


def test_keep_mixed_draws_only_the_tasks_screening_both_solved_and_failed(tiny_model_dir, tmp_path):
    """`data.frontier.keep=mixed` (pass-rate filtering): tasks the starting model always or
    never solved in screening are not drawn, in the first run and after a resume."""
    file = screening_eval(tmp_path / "screen", tiny_model_dir, "val")
    split = [t["task_id"] for t in map(json.loads, file.read_text().splitlines())]
    mixed = set(split[::2][1:7:2])  # three tasks, not the first of the split
    rescored = screening_with_mixed(file, mixed)
    keep = (*SCREENED, f"data.frontier.seed_from=[{rescored}]", "data.frontier.keep=mixed")
    config = recipe(tiny_model_dir, tmp_path / "run", *keep)
    trainer = Trainer(config)
    assert set(trainer.environments["largest"].train_tasks) == mixed
    train(config)
    played = {task for step in (1, 2) for _, task in step_tasks(config.run.out_dir, step)}
    assert played <= mixed and played
    resumed = Trainer(recipe(tiny_model_dir, tmp_path / "run", *keep, "trainer.total_steps=3"))
    assert set(resumed.environments["largest"].train_tasks) == mixed


def test_keep_mixed_without_a_mixed_task_or_a_screening_is_refused(tiny_model_dir, tmp_path):
    file = screening_eval(tmp_path / "screen", tiny_model_dir, "val", "--tasks", "0-3")
    none_mixed = screening_with_mixed(file, set())
    config = recipe(
        tiny_model_dir,
        tmp_path / "run",
        *SCREENED,
        f"data.frontier.seed_from=[{none_mixed}]",
        "data.frontier.keep=mixed",
    )
    with pytest.raises(ConfigError, match=r"none of largest's 100 training tasks.*eval -n 4"):
        Trainer(config)
    with pytest.raises(ConfigError, match=r"data.frontier.seed_from is empty"):
        recipe(tiny_model_dir, tmp_path / "run", *FRONTIER, "data.frontier.keep=mixed")


def rescreening_run(model, out: Path, seed_file: Path, *extra: str) -> TrainConfig:
    """keep=mixed from `seed_file`, re-screening every step with 2 samples a task."""
    return recipe(
        model,
        out,
        *SCREENED,
        f"data.frontier.seed_from=[{seed_file}]",
        "data.frontier.keep=mixed",
        "data.frontier.rescreen_every=1",
        "data.frontier.rescreen_samples=2",
        *extra,
    )


def test_rescreening_plays_the_pool_again_and_draws_its_mixed_tasks(tiny_model_dir, tmp_path):
    """`data.frontier.rescreen_every`: after step 1 the current policy plays every pool task
    twice; the tasks it both solved and failed are drawn from step 2 on (the first kept set
    if none), and a run resumed later draws from the latest re-screening before its
    checkpoint, not the screening before step 1."""
    from agenttrain.rl.task_stats import TrainingTasks, mixed_tasks, screened
    from agenttrain.rollout.trajectory import read_jsonl

    file = screening_eval(tmp_path / "screen", tiny_model_dir, "val")
    pool = [t["task_id"] for t in map(json.loads, file.read_text().splitlines())][::2]
    first = set(pool[1:7:2])
    config = rescreening_run(tiny_model_dir, tmp_path / "run", screening_with_mixed(file, first))
    rows = train(config)
    played = config.run.out_dir / "screens" / "step-000001.jsonl"
    episodes = list(read_jsonl(played))
    assert Counter(t.task_id for t in episodes) == Counter({task: 2 for task in pool})
    assert len({t.group_id for t in episodes}) == len(pool)  # one group a task
    counts = screened([played], {"largest": TrainingTasks(set(pool), set(pool))})[0]
    now = {task for _, task in mixed_tasks(counts)} or first
    assert rows[1]["screen/kept_tasks"] == len(now)
    assert rows[1]["screen/success"] == counts.success_rate()
    assert rows[1]["timing_s/screen"] > 0
    assert "screen/kept_tasks" not in rows[0]  # screened once before step 1, by the file
    assert {task for _, task in step_tasks(config.run.out_dir, 2)} <= now
    assert "tasks kept after re-screening" in (config.run.out_dir / "report.md").read_text()
    later = set(pool[10:16:3])
    played.write_text(screening_with_mixed(played, later).read_text())
    resumed = rescreening_run(
        tiny_model_dir,
        tmp_path / "run",
        screening_with_mixed(file, first),
        "trainer.total_steps=3",
        "data.frontier.rescreen_every=0",  # step 2's checkpoint: step 1's re-screening holds
    )
    restored = Trainer(resumed, allow_config_change=True)
    assert set(restored.environments["largest"].train_tasks) == later


def test_a_run_resumed_at_a_rescreening_reads_its_episodes_rather_than_playing_them(
    tiny_model_dir, tmp_path
):
    """The re-screening after step N comes after N's checkpoint: a run stopped there and
    resumed reads the written episodes, so it draws what an uninterrupted run would."""
    file = screening_eval(tmp_path / "screen", tiny_model_dir, "val")
    pool = [t["task_id"] for t in map(json.loads, file.read_text().splitlines())][::2]
    seed_file = screening_with_mixed(file, set(pool[1:7:2]))
    config = rescreening_run(tiny_model_dir, tmp_path / "run", seed_file, "trainer.total_steps=1")
    train(config)
    later = set(pool[10:16:3])
    written = config.run.out_dir / "screens" / "step-000001.jsonl"
    written.parent.mkdir()
    written.write_text(screening_with_mixed(file, later).read_text())  # as if played, then stopped
    rows = train(rescreening_run(tiny_model_dir, tmp_path / "run", seed_file))
    assert {task for _, task in step_tasks(config.run.out_dir, 2)} <= later
    assert rows[-1]["screen/kept_tasks"] == len(later)
    assert "timing_s/screen" not in rows[-1]  # nothing was played again
