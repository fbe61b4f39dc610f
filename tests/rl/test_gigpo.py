"""GiGPO (episode groups plus step groups of identical anchor states) against hand-computed
values, its turn structure from real trajectories, its config and a tiny training run."""

from __future__ import annotations

import json
import math

import pytest
import torch

from agenttrain.config import load
from agenttrain.envs import get_spec
from agenttrain.envs.textcraft.game import TextCraftGame
from agenttrain.envs.textcraft.recipes import default_book
from agenttrain.envs.textcraft.recoveries import inventory_states
from agenttrain.envs.textcraft.tasks import task
from agenttrain.integrations.verl.data import data_file
from agenttrain.integrations.verl.overrides import verl_overrides
from agenttrain.rl.advantages import (
    anchor_states,
    get_estimator,
    group_has_signal,
    turn_anchors,
    turn_step_rewards,
)
from agenttrain.rl.config import TrainConfig
from agenttrain.rl.update import turn_rewards, turn_structure
from agenttrain.rollout.trajectory import Trajectory, Turn
from rl.tiny_runs import recipe, train

EPS = 1e-6
TASK = "Craft a stick.  Inventory: empty"


def episode(
    group: str,
    observations: list[str],
    rewards: list[float],
    lengths: list[int],
    width: int,
) -> Trajectory:
    """An episode whose turn k replied `lengths[k]` sampled tokens to the previous observation
    (turn 0 to TASK); one environment token follows every reply; padded to `width`."""
    mask: list[int] = []
    turns = []
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": TASK}]
    steps = zip(observations, rewards, lengths, strict=True)
    for k, (observation, reward, length) in enumerate(steps):
        start = len(mask)
        mask += [1] * length + [0]
        span = (start, start + length)
        turns.append(Turn(f"reply {k}", f"act {k}", observation, reward, False, token_span=span))
        messages += [
            {"role": "assistant", "content": f"reply {k}"},
            {"role": "user", "content": observation},
        ]
    mask += [0] * (width - len(mask))
    return Trajectory(
        episode_id=f"{group}-{len(observations)}-{sum(rewards)}",
        env="textcraft",
        task_id=0,
        group_id=group,
        sample=0,
        seed=0,
        model="tiny",
        messages=messages,
        turns=turns,
        response_ids=[7] * width,
        response_mask=mask,
        logprobs=[0.0] * width,
        reward=sum(rewards),
    )


def advantages_of(episodes: list[Trajectory], **kwargs) -> torch.Tensor:
    """The update's path: turn rewards on tokens, turn structure, then the estimator."""
    mask = torch.tensor([e.response_mask for e in episodes], dtype=torch.float32)
    scores = [float(e.reward) for e in episodes]
    rewards = turn_rewards(episodes, scores, mask)
    return get_estimator("gigpo")(
        rewards, mask, [e.group_id for e in episodes], **turn_structure(episodes), **kwargs
    )


def test_three_episodes_get_episode_plus_step_advantages_by_hand():
    # γ = 0.5. A: TASK -> s1 (r 0) -> done (r 1): returns [0.5, 1].
    # B: TASK -> s2 (r 0) -> s1 (r 0) -> done (r 1): returns [0.25, 0.5, 1].
    # C: TASK -> s2 (r 0) -> end (r 0): returns [0, 0].
    a = episode("g", ["s1", "won"], [0.0, 1.0], [2, 1], width=9)
    b = episode("g", ["s2", "s1", "won"], [0.0, 0.0, 1.0], [1, 1, 1], width=9)
    c = episode("g", ["s2", "lost"], [0.0, 0.0], [2, 2], width=9)
    advantages = advantages_of([a, b, c], gamma=0.5, epsilon=EPS)
    # Episode level: scores [1, 1, 0], mean 2/3, std sqrt(1/3).
    std = math.sqrt(1 / 3)
    win, loss = (1 / 3) / (std + EPS), (-2 / 3) / (std + EPS)
    # Step groups: TASK {A 0.5, B 0.25, C 0} mean 0.25 std 0.25 -> [1, 0, -1];
    # s1 {A 1, B 1} -> 0; s2 {B 0.5, C 0} mean 0.25 std sqrt(0.125) -> ±0.25/0.35355.
    s2 = 0.25 / (math.sqrt(0.125) + EPS)
    first = 0.25 / (0.25 + EPS)
    expected = [
        [win + first, win + first, 0, win, 0, 0, 0, 0, 0],
        [win, 0, win + s2, 0, win, 0, 0, 0, 0],
        [loss - first, loss - first, 0, loss - s2, loss - s2, 0, 0, 0, 0],
    ]
    assert advantages.tolist() == [pytest.approx(row, abs=1e-5) for row in expected]


def test_an_all_solved_group_of_different_lengths_is_separated_where_grpo_is_not():
    short = episode("g", ["s1", "won"], [0.0, 1.0], [1, 1], width=6)
    long = episode("g", ["s2", "s1", "won"], [0.0, 0.0, 1.0], [1, 1, 1], width=6)
    advantages = advantages_of([short, long], gamma=0.9, epsilon=EPS)
    # Returns at TASK: 0.9 vs 0.81 -> ±1/sqrt(2) (two values, unbiased std = gap/sqrt(2));
    # s1: both 1 -> 0; s2 alone -> 0; scores equal -> A^E = 0.
    half = 0.045 / (0.09 / math.sqrt(2) + EPS)
    assert advantages.tolist() == [
        pytest.approx([half, 0, 0, 0, 0, 0], abs=1e-5),
        pytest.approx([-half, 0, 0, 0, 0, 0], abs=1e-5),
    ]
    mask = torch.tensor([short.response_mask, long.response_mask], dtype=torch.float32)
    outcome = turn_rewards([short, long], [1.0, 1.0], mask)
    assert get_estimator("grpo")(outcome, mask, ["g", "g"]).abs().sum() == 0
    dr = advantages_of([short, long], gamma=0.9, norm_by_std=False)
    assert dr[:, 0].tolist() == pytest.approx([0.045, -0.045], abs=1e-6)


def test_group_signal_counts_step_returns_only_for_gigpo_with_a_discount():
    short = episode("g", ["s1", "won"], [0.0, 1.0], [1, 1], width=6)
    long = episode("g", ["s2", "s1", "won"], [0.0, 0.0, 1.0], [1, 1, 1], width=6)
    assert group_has_signal("gigpo", [short, long], [1.0, 1.0], gamma=0.9)
    assert not group_has_signal("gigpo", [short, long], [1.0, 1.0], gamma=1.0)
    assert not group_has_signal("grpo", [short, long], [1.0, 1.0], gamma=0.9)
    assert group_has_signal("grpo", [short, long], [1.0, 0.0], gamma=1.0)


def test_undiscounted_identical_anchors_give_one_plus_step_weight_times_grpo():
    won = episode("g", ["s1", "won"], [0.0, 1.0], [1, 2], width=5)
    lost = episode("g", ["s1", "lost"], [0.0, 0.0], [1, 2], width=5)
    advantages = advantages_of([won, lost], gamma=1.0, step_weight=0.5, epsilon=EPS)
    mask = torch.tensor([won.response_mask, lost.response_mask], dtype=torch.float32)
    outcome = turn_rewards([won, lost], [1.0, 0.0], mask)
    grpo = get_estimator("grpo")(outcome, mask, ["g", "g"], epsilon=EPS)
    assert torch.allclose(advantages, 1.5 * grpo, atol=1e-6)
    assert advantages[0, 0].item() == pytest.approx(1.5 / math.sqrt(2), abs=1e-5)


def test_a_turn_without_model_tokens_hands_its_reward_to_the_turn_before():
    # Turn 1 sampled nothing (span [2, 2)); its reward lands on turn 0's last token.
    empty = episode("g", ["s1", "won"], [0.5, 0.5], [1, 0], width=4)
    other = episode("g", ["s2", "lost"], [0.0, 0.0], [1, 1], width=4)
    mask = torch.tensor([empty.response_mask, other.response_mask], dtype=torch.float32)
    rewards = turn_rewards([empty, other], [1.0, 0.0], mask)
    assert rewards[0].tolist() == [1.0, 0.0, 0.0, 0.0]
    advantages = advantages_of([empty, other], gamma=0.9, epsilon=EPS)
    assert torch.isfinite(advantages).all()
    assert advantages[0, 1:].abs().sum() == 0  # no model tokens after the first
    only_empty = episode("g", ["won"], [1.0], [0], width=4)
    assert advantages_of([only_empty, other], gamma=0.9)[0].abs().sum() == 0


def test_step_rewards_add_up_to_the_score_used_for_the_episode_advantage():
    shaped = episode("g", ["s1", "won"], [0.25, 0.75], [1, 1], width=4)
    assert turn_step_rewards(shaped, 1.0) == [0.25, 0.75]  # a `sum` environment's rewards
    # A custom reward function's score (or a `last` environment with rewards on the way)
    # does not decompose into the turn rewards: it is the last turn's reward.
    assert turn_step_rewards(shaped, 0.4) == [0.0, 0.4]
    assert turn_anchors(shaped) == ["Craft a stick. Inventory: empty", "s1"]


def test_a_turn_after_a_format_error_is_anchored_on_the_state_it_still_faces():
    played = episode(
        "g",
        ["Invalid action. Use the format: Action: ...", "s1", "won"],
        [0, 0, 1],
        [1, 1, 1],
        width=6,
    )
    played.turns[0].action, played.turns[0].format_error = None, True  # the env never stepped
    other = episode(
        "g", ["Invalid action. Use the format: Action: ...", "won"], [0, 1], [1, 1], width=6
    )
    other.turns[0].action = None
    twice = episode(
        "g",
        ["s1", "Invalid action. Use the format: Action: ...", "won"],
        [0, 0, 1],
        [1, 1, 1],
        width=6,
    )
    twice.turns[1].action = None
    task = "Craft a stick. Inventory: empty"
    assert turn_anchors(played) == [task, task, "s1"]
    assert turn_anchors(other) == [task, task]
    assert turn_anchors(twice) == [task, "s1", "s1"]  # feedback text is never a state


def played_actions(actions: list[str | None]) -> Trajectory:
    """A TextCraft episode of task 0 (acacia planks) that sent `actions` (None: a format
    error), with the game's observations."""
    game = TextCraftGame(default_book(), task(0).goal)
    observations = [game.step(a).observation if a else "Invalid action." for a in actions]
    played = episode("g", observations, [0.0] * len(actions), [1] * len(actions), width=12)
    for turn, action in zip(played.turns, actions, strict=True):
        turn.action = action
    return played


def test_state_anchors_pool_turns_that_hold_the_same_inventory_whatever_they_read():
    craft = "craft 4 acacia planks using 1 acacia logs"
    direct = played_actions(["get 1 acacia logs", craft])
    checked = played_actions(["get 1 acacia logs", "inventory", None, craft])
    refused_first = played_actions([craft, "get 1 acacia logs", craft])
    by_observation = [turn_anchors(e) for e in (direct, checked, refused_first)]
    by_state = [turn_anchors(e, inventory_states) for e in (direct, checked, refused_first)]
    assert by_observation[1][2] != by_observation[0][1]  # the inventory text, "Got 1 ..."
    assert by_state == [
        ["", "1 acacia logs"],
        ["", "1 acacia logs", "1 acacia logs", "1 acacia logs"],  # a format error: unchanged
        ["", "", "1 acacia logs"],  # a refused craft changes nothing
    ]
    structure = turn_structure([direct, checked], {"textcraft": inventory_states})
    assert structure["anchors"] == by_state[:2]


def test_state_anchors_for_an_environment_without_states_are_refused(tmp_path):
    with pytest.raises(ValueError, match="babyai does not report its state"):
        anchor_states([get_spec("textcraft"), get_spec("babyai")], "state")
    assert anchor_states([get_spec("babyai")], "observation") == {}
    config = [f"run.out_dir={tmp_path}", "algorithm.gigpo.anchor=state"]
    assert load(TrainConfig, None, config).algorithm.gigpo.anchor == "state"


def test_gigpo_discounts_by_default_and_keeps_an_explicit_gamma(tmp_path):
    base = [f"run.out_dir={tmp_path}", "algorithm.adv_estimator=gigpo"]
    assert load(TrainConfig, None, base).algorithm.gamma == 0.95
    assert load(TrainConfig, None, [*base, "algorithm.gamma=1"]).algorithm.gamma == 1.0
    assert load(TrainConfig, None, [f"run.out_dir={tmp_path}"]).algorithm.gamma == 1.0
    weighted = load(TrainConfig, None, [*base, "algorithm.gigpo.step_weight=0.5"])
    assert weighted.algorithm.gigpo.step_weight == 0.5
    with pytest.raises(ValueError, match=r"cannot learn with data\.group_size=1"):
        load(TrainConfig, None, [*base, "data.group_size=1"])


def test_the_verl_bridge_refuses_gigpo(smollm2_dir, tmp_path):
    config = load(
        TrainConfig,
        None,
        [
            f"model.path={smollm2_dir}",
            f"run.out_dir={tmp_path / 'run'}",
            "algorithm.adv_estimator=gigpo",
        ],
    )
    env = config.environments[0]
    with pytest.raises(ValueError, match=r"verl 0\.9\.1 has no GiGPO"):
        verl_overrides(
            config,
            train_files=[data_file(tmp_path, env.name, env.split, "verl")],
            val_files=[data_file(tmp_path, env.name, env.val_split, "verl")],
            loop_config_path=tmp_path / "agent_loop.yaml",
        )


@pytest.mark.parametrize("anchor", ["observation", "state"])
def test_a_multi_turn_gigpo_step_trains_on_recorded_turn_spans(tiny_model_dir, tmp_path, anchor):
    config = recipe(
        tiny_model_dir,
        tmp_path / "run",
        "algorithm.adv_estimator=gigpo",
        f"algorithm.gigpo.anchor={anchor}",
        "env.name=textcraft",
        "rollout.action_format=react",
        "rollout.max_turns=3",
        "rollout.max_new_tokens=12",
        "rollout.max_context=1024",
        "data.batch_tasks=2",
        "data.group_size=2",
        "trainer.total_steps=1",
        "trainer.test_freq=0",
    )
    rows = train(config)
    step = next(row for row in rows if row["step"] == 1)
    assert math.isfinite(step["actor/pg_loss"]) and math.isfinite(step["critic/advantages/mean"])
    lines = (tmp_path / "run" / "trajectories" / "step-000001.jsonl").read_text().splitlines()
    episodes = [Trajectory.from_dict(json.loads(line)) for line in lines]
    assert any(e.num_turns > 1 for e in episodes)
    for trajectory in episodes:
        spans = [turn.token_span for turn in trajectory.turns]
        assert all(span is not None for span in spans)
        covered = sum(end - start for start, end in spans)
        assert covered == sum(trajectory.response_mask)  # every sampled token, once
        for start, end in spans:
            assert all(trajectory.response_mask[start:end])


def test_spans_survive_jsonl_and_records_without_them_are_refused_not_guessed():
    played = episode("g", ["s1", "won"], [0.0, 1.0], [2, 1], width=5)
    again = Trajectory.from_dict(json.loads(json.dumps(played.to_dict())))
    assert [turn.token_span for turn in again.turns] == [(0, 2), (3, 4)]
    old = played.to_dict()
    for turn in old["turns"]:
        del turn["token_span"]  # a record written before spans were kept
    legacy = Trajectory.from_dict(old)
    assert legacy.turns[0].token_span is None
    with pytest.raises(ValueError, match="no per-turn token spans"):
        turn_structure([legacy])
