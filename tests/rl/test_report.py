"""The training plots show what each metric says: no hidden lines, no flat panels, no
fractional steps, no gradient norm on the loss scale."""

from __future__ import annotations

import matplotlib.pyplot as plt

from agenttrain.rl.report import training_figure


def rows(kl: float) -> list[dict[str, float]]:
    return [
        {
            "step": step,
            "critic/score/mean": 0.5,
            "env/success_rate": 0.5,  # equal to the score: 0/1 rewards
            "actor/kl_loss": kl,
            "actor/ppo_kl": 0.0,
            "actor/pg_loss": 0.01,
            "actor/grad_norm": 40.0,
            "timing_s/gen": 1.0,
            "timing_s/step": 1.5,
        }
        for step in (1, 2, 3)
    ]


def panels(figure) -> dict[str, object]:
    return {axis.get_title(): axis for axis in figure.axes if axis.get_title()}


def test_the_kl_panel_is_hidden_when_no_kl_is_used_and_shown_when_it_is():
    without, with_kl = training_figure(rows(0.0)), training_figure(rows(0.02))
    try:
        assert "KL" not in panels(without)
        assert "KL" in panels(with_kl)
    finally:
        plt.close(without)
        plt.close(with_kl)


def test_equal_lines_stay_visible_steps_are_whole_and_grad_norm_has_its_own_panel():
    figure = training_figure(rows(0.0))
    try:
        shown = panels(figure)
        score, success = shown["reward and success"].get_lines()
        assert score.get_linestyle() != success.get_linestyle()
        assert score.get_linewidth() > success.get_linewidth()
        losses = [line.get_label() for line in shown["losses"].get_lines()]
        assert losses == ["actor/pg_loss"]
        assert [line.get_label() for line in shown["gradient norm"].get_lines()] == [
            "actor/grad_norm"
        ]
        for axis in shown.values():
            assert all(tick == int(tick) for tick in axis.get_xticks())
    finally:
        plt.close(figure)


def test_action_counts_get_their_own_panel_and_nothing_is_pushed_off_the_grid():
    """rollout/actions/<verb> (TextCraft: get, craft, inventory) is drawn, so a policy that
    stops crafting shows as a line falling to 0; with every other panel shown too, the grid
    grows a row instead of dropping the timing panel."""
    full = rows(0.02)
    for row, crafts in zip(full, (5.0, 2.0, 0.0), strict=True):
        row.update({"rollout/actions/craft": crafts, "rollout/actions/get": 4.0})
        row.update({"actor/entropy": 0.02, "response_length/mean": 40.0, "num_turns/mean": 6.0})
    figure, plain = training_figure(full), training_figure(rows(0.02))
    try:
        shown = panels(figure)
        lines = {line.get_label(): line for line in shown["actions per episode"].get_lines()}
        assert set(lines) == {"rollout/actions/craft", "rollout/actions/get"}
        assert list(lines["rollout/actions/craft"].get_ydata()) == [5.0, 2.0, 0.0]
        assert "time per step (s)" in shown and len(shown) == 9
        assert "actions per episode" not in panels(plain)
    finally:
        plt.close(figure)
        plt.close(plain)


def test_a_run_with_oracle_starts_shows_success_from_scratch_and_the_oracles_turns():
    """With data.oracle_start the step's success mixes in help from the oracle: the episodes
    played from scratch get their own line, and the oracle's turns sit by the turn count."""
    guided = rows(0.0)
    for row, scratch in zip(guided, (0.1, 0.2, 0.3), strict=True):
        row.update({"env/success_rate_from_scratch": scratch, "rollout/oracle_turns": 2.0})
        row["num_turns/mean"] = 6.0
    figure = training_figure(guided)
    try:
        shown = panels(figure)
        success = {line.get_label() for line in shown["reward and success"].get_lines()}
        assert "env/success_rate_from_scratch" in success
        turns = {line.get_label() for line in shown["turns per episode"].get_lines()}
        assert turns == {"num_turns/mean", "rollout/oracle_turns"}
    finally:
        plt.close(figure)


def test_informative_groups_by_difficulty_class_get_a_panel_when_the_env_names_classes():
    """A run whose signal comes only from depth-1 goals shows it: a line per class."""
    classed = rows(0.0)
    for row, deep in zip(classed, (0, 1, 3), strict=True):
        row["rollout/stratum/depth_1/informative_groups"] = 4
        row["rollout/stratum/depth_2/informative_groups"] = deep
    figure, plain = training_figure(classed), training_figure(rows(0.0))
    try:
        lines = panels(figure)["informative groups by class"].get_lines()
        assert [line.get_label() for line in lines] == [
            "rollout/stratum/depth_1/informative_groups",
            "rollout/stratum/depth_2/informative_groups",
        ]
        assert list(lines[1].get_ydata()) == [0, 1, 3]
        assert "informative groups by class" not in panels(plain)
    finally:
        plt.close(figure)
        plt.close(plain)
