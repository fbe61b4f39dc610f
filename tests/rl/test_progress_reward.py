"""reward.progress_weight: partial credit for unsolved episodes in training (issue 26)."""

from __future__ import annotations

from itertools import pairwise

import pytest
from typer.testing import CliRunner

from agenttrain.cli import app
from agenttrain.envs.registry import get_spec
from agenttrain.rl.config import TrainConfig
from agenttrain.rl.rewards import RewardFunctionError, add_progress, progress_functions
from agenttrain.rl.scoring import EpisodeScorer
from agenttrain.rl.trainer import Trainer
from agenttrain.rollout.trajectory import read_jsonl
from rl.tiny_runs import recipe


def cut_oracle_episodes(tmp_path, max_turns: int) -> list:
    """The oracle on train tasks of depth 2 and 3, stopped after `max_turns` turns: real
    TextCraft episodes that end unsolved part of the way."""
    arguments = ["eval", "--env", "textcraft", "--split", "train", "--tasks", "100-107"]
    arguments += ["--model", "oracle", "--max-turns", str(max_turns), "--out", str(tmp_path)]
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 0, result.output
    return list(read_jsonl(next(tmp_path.glob("*/episodes.jsonl"))))


def scorer(config: TrainConfig) -> EpisodeScorer:
    """The reward pipeline a trainer with `config` scores its episodes with."""
    return EpisodeScorer(config.reward, [get_spec(config.env.name)])


def test_unsolved_episodes_score_the_weight_times_their_progress(tmp_path):
    episodes = cut_oracle_episodes(tmp_path, max_turns=2)
    spec = get_spec("textcraft")
    scores, metrics = add_progress(
        episodes, [0.0] * len(episodes), progress_functions([spec], 0.5), 0.5
    )
    credits = [
        spec.progress(e.task_id, [t.action for t in e.turns if t.action is not None])
        for e in episodes
    ]
    assert not any(episode.success for episode in episodes)
    assert scores == [0.5 * credit for credit in credits]
    assert 0 < min(s for s in scores if s) < max(scores)  # a signal success alone lacks
    assert metrics["reward/progress"] == credits


def test_solved_episodes_keep_their_score_and_errored_ones_get_no_credit(tmp_path):
    solved = cut_oracle_episodes(tmp_path / "solved", max_turns=30)
    cut = cut_oracle_episodes(tmp_path / "cut", max_turns=2)
    assert all(episode.success for episode in solved)
    for episode in cut:
        episode.finish_reason = "env_error"
    progress = progress_functions([get_spec("textcraft")], 0.5)
    scores, metrics = add_progress(
        solved + cut, [1.0] * len(solved) + [0.0] * len(cut), progress, 0.5
    )
    assert scores == [1.0] * len(solved) + [0.0] * len(cut)
    assert metrics == {}  # no unsolved, unerrored episode: no progress to report


def test_an_environment_without_progress_is_refused_before_the_run_starts(tiny_model_dir, tmp_path):
    config = recipe(tiny_model_dir, tmp_path / "run", "reward.progress_weight=0.3")
    with pytest.raises(RewardFunctionError, match="largest reports no progress"):
        Trainer(config)
    assert not (tmp_path / "run").exists()


def test_the_partial_credit_fades_to_success_only_over_the_steps_asked(tiny_model_dir, tmp_path):
    """With reward.progress_fade_steps=N the same unsolved episodes earn less credit each step
    and none from step N + 1 on, so a run that used partial credit to find its first signal
    ends on success alone (at a constant weight the shaped reward was learned instead of
    success, docs/results.md)."""
    episodes = cut_oracle_episodes(tmp_path / "cut", max_turns=2)
    config = recipe(
        tiny_model_dir,
        tmp_path / "run",
        "env.name=textcraft",
        "rollout.action_format=react",
        "reward.progress_weight=0.5",
        "reward.progress_fade_steps=4",
    )
    trainer = Trainer(config)
    steady = add_progress(
        episodes, [0.0] * len(episodes), progress_functions([get_spec("textcraft")], 0.5), 0.5
    )[0]
    assert any(steady)
    for step, share in ((1, 1.0), (2, 0.75), (4, 0.25), (5, 0.0), (9, 0.0)):
        scores, _ = trainer.scorer.score(episodes, step)
        assert scores == pytest.approx([share * score for score in steady])
        assert trainer.scorer.progress_weight(step) == pytest.approx(0.5 * share)


def test_a_fade_without_a_weight_is_refused():
    from agenttrain.config import ConfigError, load
    from rl.tiny_runs import RECIPE

    with pytest.raises(ConfigError, match=r"reward\.progress_fade_steps is set but"):
        load(TrainConfig, RECIPE, ["reward.progress_fade_steps=4"])


def test_episodes_that_broke_the_action_format_score_the_penalty_less(tiny_model_dir, tmp_path):
    """reward.format_penalty: real episodes of a random model (every reply unparseable) score
    the penalty below the oracle's unsolved ones, solved ones keep theirs, so a group of
    failures that differ only in format is no longer uniform; 0 changes nothing."""
    solved = cut_oracle_episodes(tmp_path / "solved", max_turns=30)
    cut = cut_oracle_episodes(tmp_path / "cut", max_turns=2)
    arguments = ["eval", "--env", "textcraft", "--split", "train", "--tasks", "100-101"]
    arguments += ["--model", str(tiny_model_dir), "--max-turns", "4", "--max-new-tokens", "8"]
    result = CliRunner().invoke(app, [*arguments, "--out", str(tmp_path / "broken")])
    assert result.exit_code == 0, result.output
    broken = list(read_jsonl(next((tmp_path / "broken").glob("*/episodes.jsonl"))))
    assert all(e.format_errors and not e.errored for e in broken)
    assert not any(e.format_errors for e in solved + cut)
    episodes = solved + cut + broken
    config = recipe(
        tiny_model_dir,
        tmp_path / "run",
        "env.name=textcraft",
        "rollout.action_format=react",
        "reward.format_penalty=0.25",
    )
    scores, metrics = scorer(config).score(episodes, 1)
    assert scores == [1.0] * len(solved) + [0.0] * len(cut) + [-0.25] * len(broken)
    assert metrics["reward/format_penalised"] == [0.0] * len(solved + cut) + [1.0] * len(broken)
    plain = recipe(tiny_model_dir, tmp_path / "plain", "env.name=textcraft")
    assert scorer(plain).score(episodes, 1) == (
        [1.0] * len(solved) + [0.0] * len(cut + broken),
        {},
    )


def replayed_task(task_id: int, actions: list[str]) -> list:
    """`actions` played in the real TextCraft game on `task_id`, as turns."""
    import asyncio

    from agenttrain.envs import make_env
    from agenttrain.rollout.trajectory import Turn

    env = make_env("textcraft")

    async def play():
        await env.reset(task_id)
        return [await env.step(action) for action in actions]

    results = asyncio.run(play())
    return [
        Turn(f"Action: {a}", a, r.observation, r.reward, r.done)
        for a, r in zip(actions, results, strict=True)
    ]


def replayed(episode, actions: list[str]):
    """`episode` (a real TextCraft episode) with its turns replaced by `actions` played from
    the same task: the observations are the game's own."""
    import copy

    out = copy.deepcopy(episode)
    out.turns = replayed_task(episode.task_id, actions)
    out.success = any(turn.done for turn in out.turns)
    out.reward = out.turns[-1].reward  # the last step's, as AgentGym reports it
    return out


def test_turns_that_repeat_a_refused_action_unchanged_are_looping(tmp_path):
    """reward.loop_penalty's count, on real TextCraft play: a refused craft tried again as it
    was loops; tried again after fetching what it lacked does not, and neither does an
    accepted action repeated (the oracle crafts planks twice when it needs eight)."""
    from agenttrain.envs.textcraft.game import refused
    from agenttrain.rl.rewards import looping_turns

    episodes = cut_oracle_episodes(tmp_path, max_turns=30)
    assert all(looping_turns(e, refused) == 0 for e in episodes)  # the oracle never loops
    assert any(  # ... though it repeats accepted actions
        a.action == b.action for e in episodes for a, b in pairwise(e.turns)
    )
    actions = [turn.action for turn in episodes[0].turns]
    craft = next(a for a in actions if a.startswith("craft"))
    looped = replayed(episodes[0], [craft, craft, craft, *actions])
    assert refused(looped.turns[0].observation)
    assert looping_turns(looped, refused) == 2
    before = actions[: actions.index(craft)]
    recovered = replayed(episodes[0], [craft, *before, craft])
    assert not refused(recovered.turns[-1].observation)
    assert looping_turns(recovered, refused) == 0


def test_every_refusal_of_the_textcraft_game_is_recognised():
    from agenttrain.envs.textcraft.game import refused

    actions = ["craft 1 stick using 2 planks", "get 1 stick", "jump"]
    actions += ["craft 1 stick using two planks", "inventory"]
    turns = replayed_task(100, actions)
    assert [refused(t.observation) for t in turns] == [True, True, True, True, False]


def test_looping_episodes_score_the_penalty_times_their_looping_share(tiny_model_dir, tmp_path):
    """A group whose episodes all fail still differs by how much of its budget each spent
    going nowhere; solved episodes keep their score, errored ones are left alone, an
    environment that cannot tell refusals is refused before the run, and 0 (the default)
    changes nothing."""
    solved = cut_oracle_episodes(tmp_path / "solved", max_turns=30)
    craft = next(t.action for t in solved[0].turns if t.action.startswith("craft"))
    looping = replayed(solved[0], [craft] * 4)  # 3 of 4 turns loop
    errored = replayed(solved[0], [craft] * 4)
    errored.finish_reason = "env_error"
    episodes = [*solved, looping, errored]
    base = [1.0] * len(solved) + [0.0, 0.0]
    config = recipe(
        tiny_model_dir,
        tmp_path / "run",
        "env.name=textcraft",
        "rollout.action_format=react",
        "reward.loop_penalty=0.5",
    )
    scores, metrics = scorer(config).score(episodes, 1)
    assert scores == pytest.approx([*base[:-2], -0.5 * 3 / 4, 0.0])
    assert metrics["reward/looping"] == pytest.approx([0.0] * len(solved) + [0.75, 0.0])
    plain = recipe(tiny_model_dir, tmp_path / "plain", "env.name=textcraft")
    assert scorer(plain).score(episodes, 1) == (base, {})
    largest = recipe(tiny_model_dir, tmp_path / "largest", "reward.loop_penalty=0.5")
    with pytest.raises(RewardFunctionError, match="largest does not say which observations"):
        Trainer(largest)
    assert not (tmp_path / "largest").exists()


def test_refusals_not_answered_with_what_was_lacking_score_the_recovery_penalty(
    tiny_model_dir, tmp_path
):
    """reward.recovery_penalty on real TextCraft play: after a refused craft, fetching the
    lacking gravel costs nothing, fetching more of the dirt already held costs its share;
    solved and errored episodes are left as they were, an environment that cannot tell is
    refused before the run, and 0 (the default) changes nothing."""
    import copy

    from agenttrain.envs.textcraft.recipes import default_book

    solved = cut_oracle_episodes(tmp_path / "solved", max_turns=30)
    dirt = copy.deepcopy(solved[0])
    dirt.task_id = [goal for goal, _ in default_book().goals()].index("minecraft:coarse_dirt")
    early = ["get 2 dirt", "craft 4 coarse dirt using 2 dirt, 2 gravel"]
    right = replayed(dirt, [*early, "get 2 gravel"])
    wrong_then_right = replayed(dirt, [*early, "get 2 dirt", early[1], "get 2 gravel"])
    errored = replayed(dirt, [*early, "get 2 dirt"])
    errored.finish_reason = "env_error"
    episodes = [*solved, right, wrong_then_right, errored]
    assert not any(e.success for e in episodes[len(solved) :])
    config = recipe(
        tiny_model_dir,
        tmp_path / "run",
        "env.name=textcraft",
        "rollout.action_format=react",
        "reward.recovery_penalty=0.4",
    )
    scores, metrics = scorer(config).score(episodes, 1)
    assert scores == pytest.approx([1.0] * len(solved) + [0.0, -0.4 * 1 / 2, 0.0])
    assert metrics["reward/unrecovered"] == [0.0] * len(solved) + [0.0, 0.5, 0.0]
    plain = recipe(tiny_model_dir, tmp_path / "plain", "env.name=textcraft")
    assert scorer(plain).score(episodes, 1) == ([1.0] * len(solved) + [0.0] * 3, {})
    largest = recipe(tiny_model_dir, tmp_path / "largest", "reward.recovery_penalty=0.4")
    with pytest.raises(RewardFunctionError, match="largest does not report whether a refusal"):
        Trainer(largest)
    assert not (tmp_path / "largest").exists()


def test_refusal_penalties_in_solved_groups_only_stop_rewarding_episodes_that_never_craft(
    tiny_model_dir, tmp_path
):
    """reward.{loop,recovery}_penalty_groups=solved, on real TextCraft play: in a group
    nobody solved, the loop and recovery penalties ranked the episode that only fetched (no
    craft, so no refusal) above one that tried a craft and looped, a preference a policy
    learns to copy (a seed collapsed to 0% that way); with `solved` that group has no
    penalty, so no such signal, while a group with a success still charges its failures."""
    import copy

    from agenttrain.envs.textcraft.recipes import default_book

    solved = cut_oracle_episodes(tmp_path / "solved", max_turns=30)[0]
    dirt = copy.deepcopy(solved)
    dirt.task_id = [goal for goal, _ in default_book().goals()].index("minecraft:coarse_dirt")
    craft = "craft 4 coarse dirt using 2 dirt, 2 gravel"
    tried = ["get 2 dirt", craft, craft, "get 2 dirt"]  # 1 loop in 4 turns, 2 of 2 unrecovered
    fetch_only = ["get 2 dirt", "get 2 dirt", "get 2 dirt", "get 2 dirt"]
    group = {"solved": [solved, replayed(solved, [solved.turns[0].action, *tried[1:]])]}
    group["unsolved"] = [replayed(dirt, tried), replayed(dirt, fetch_only)]
    episodes = []
    for name, members in group.items():
        for episode in members:
            episode.group_id = name
            episodes.append(episode)
    assert [e.success for e in episodes] == [True, False, False, False]
    shaping = ["env.name=textcraft", "rollout.action_format=react"]
    shaping += ["reward.loop_penalty=0.4", "reward.recovery_penalty=0.2"]
    everywhere, _ = scorer(recipe(tiny_model_dir, tmp_path / "all", *shaping)).score(episodes, 1)
    both = ["reward.loop_penalty_groups=solved", "reward.recovery_penalty_groups=solved"]
    scoped = recipe(tiny_model_dir, tmp_path / "solved_groups", *shaping, *both)
    scores, metrics = scorer(scoped).score(episodes, 1)
    tried_cost = 0.4 * 1 / 4 + 0.2 * 2 / 2
    assert everywhere[2] == pytest.approx(-tried_cost) and everywhere[3] == 0.0
    assert scores[2] == scores[3] == 0.0  # the unsolved group: nothing to prefer
    assert scores[0] == 1.0 and scores[1] < 0.0 and scores[1] == everywhere[1]
    assert metrics["reward/looping"][2] == pytest.approx(0.25)  # still measured, not charged


def test_recovery_penalty_in_solved_groups_keeps_the_loop_penalty_everywhere(
    tiny_model_dir, tmp_path
):
    """Each penalty has its own scope: with only the recovery penalty limited to groups with
    a success, an unsolved group's episode that repeats a refused craft still pays for the
    repeat (what came back in a seed when both were limited), but not for going after the
    wrong item; in a solved group it pays both."""
    import copy

    from agenttrain.envs.textcraft.recipes import default_book

    solved = cut_oracle_episodes(tmp_path / "solved", max_turns=30)[0]
    dirt = copy.deepcopy(solved)
    dirt.task_id = [goal for goal, _ in default_book().goals()].index("minecraft:coarse_dirt")
    craft = "craft 4 coarse dirt using 2 dirt, 2 gravel"
    tried = ["get 2 dirt", craft, craft, "get 2 dirt"]  # 1 loop in 4 turns, 2 of 2 unrecovered
    episodes = [
        solved,
        replayed(solved, [solved.turns[0].action, *tried[1:]]),
        replayed(dirt, tried),
    ]
    for episode, group in zip(episodes, ["solved", "solved", "unsolved"], strict=True):
        episode.group_id = group
    shaping = ["env.name=textcraft", "rollout.action_format=react", "reward.loop_penalty=0.4"]
    shaping += ["reward.recovery_penalty=0.2", "reward.recovery_penalty_groups=solved"]
    scores, metrics = scorer(recipe(tiny_model_dir, tmp_path / "run", *shaping)).score(episodes, 1)
    assert scores[2] == pytest.approx(-0.4 * 1 / 4)  # the loop only
    assert metrics["reward/unrecovered"][2] == pytest.approx(1.0)  # measured, not charged
    looped, unrecovered = metrics["reward/looping"][1], metrics["reward/unrecovered"][1]
    assert unrecovered > 0
    assert scores[1] == pytest.approx(-0.4 * looped - 0.2 * unrecovered)


def test_refusal_penalty_groups_without_a_penalty_is_refused(tiny_model_dir, tmp_path):
    """`solved` for a penalty that is 0 would change nothing: a configuration error."""
    from agenttrain.config import ConfigError

    with pytest.raises(ConfigError, match="where the loop penalty is charged, but"):
        recipe(tiny_model_dir, tmp_path / "run", "reward.loop_penalty_groups=solved")
    with pytest.raises(ConfigError, match="where the recovery penalty is charged, but"):
        recipe(
            tiny_model_dir,
            tmp_path / "run",
            "reward.loop_penalty=0.5",
            "reward.recovery_penalty_groups=solved",
        )


def test_refusal_penalties_capped_at_progress_never_rank_a_failure_below_doing_nothing(
    tiny_model_dir, tmp_path
):
    """reward.refusal_penalty_cap=progress, on real TextCraft play (oak fence, depth 2): the
    loop and recovery penalties take at most a failure's partial credit, so in a group
    nobody solved, trying a craft and being refused never scores below only fetching (the
    preference a seed collapsed into with the penalties in every group), while a failure
    that crafted planks still pays for its loop out of that credit, and a success pays in
    full."""
    import copy

    from agenttrain.envs.textcraft.recipes import default_book

    template = cut_oracle_episodes(tmp_path / "solved", max_turns=30)[0]
    fence_task = [goal for goal, _ in default_book().goals()].index("minecraft:oak_fence")
    logs, planks = "get 1 oak logs", "craft 4 oak planks using 1 oak logs"
    fence = "craft 3 oak fence using 2 stick, 4 oak planks"
    plays = {
        "planks_then_loop": [logs, planks, fence, fence, logs],
        "refused_only": [logs, fence, fence, logs],
        "fetch_only": [logs, logs, logs, logs],
        "solved_after_a_loop": [
            logs,
            fence,
            fence,
            planks,
            logs,
            planks,
            "craft 4 stick using 2 oak planks",
            fence,
        ],
    }
    episodes = []
    for name, actions in plays.items():
        episode = copy.deepcopy(template)
        episode.task_id = fence_task
        episode = replayed(episode, actions)
        episode.group_id = "solved" if name.startswith("solved") else "unsolved"
        episodes.append(episode)
    assert [e.success for e in episodes] == [False, False, False, True]
    shaping = ["env.name=textcraft", "rollout.action_format=react", "reward.progress_weight=0.5"]
    shaping += ["reward.loop_penalty=0.2", "reward.recovery_penalty=0.1"]
    uncapped, _ = scorer(recipe(tiny_model_dir, tmp_path / "none", *shaping)).score(episodes, 1)
    capped = recipe(
        tiny_model_dir, tmp_path / "cap", *shaping, "reward.refusal_penalty_cap=progress"
    )
    scores, metrics = scorer(capped).score(episodes, 1)

    assert uncapped[1] < uncapped[2] == 0.0  # without the cap, never crafting wins
    assert scores[1] == scores[2] == 0.0
    credit = 0.5 * get_spec("textcraft").progress(fence_task, plays["planks_then_loop"])
    cost = 0.2 * metrics["reward/looping"][0] + 0.1 * metrics["reward/unrecovered"][0]
    assert 0 < cost < credit  # this one keeps part of its credit
    assert scores[0] == uncapped[0] == pytest.approx(credit - cost)
    assert scores[3] == uncapped[3] < 1.0  # a success's loop is charged in full


def test_a_refusal_penalty_cap_without_credit_or_penalty_is_refused(tiny_model_dir, tmp_path):
    """Capping at a partial credit of 0 would switch the penalties off; capping no penalty
    changes nothing: both configuration errors, before the run."""
    from agenttrain.config import ConfigError

    cap = "reward.refusal_penalty_cap=progress"
    with pytest.raises(ConfigError, match="every penalty would be capped at 0"):
        recipe(tiny_model_dir, tmp_path / "a", "reward.loop_penalty=0.5", cap)
    with pytest.raises(ConfigError, match="both are 0"):
        recipe(tiny_model_dir, tmp_path / "b", "reward.progress_weight=0.5", cap)
