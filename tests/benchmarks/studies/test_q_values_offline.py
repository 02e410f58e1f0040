"""The offline critic study: PPO's action values driven by a simulated behaviour on an exact
model (random features, no language model)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from benchmarks.studies.q_values_offline import (
    DuelingHead,
    offline_critic,
    plot,
    simulate,
    with_floor,
)
from gym_llm.evaluation.exact import BlackjackTable
from tests.builders import td_fit


def _run(seed: int, follow: bool) -> list[dict[str, Any]]:
    env = gym.make("FrozenLake-v1", is_slippery=False)
    torch.manual_seed(seed)
    features = torch.eye(16)  # one feature per state: every state told apart
    critic = offline_critic(features, 4, n_steps=3, seed=seed)
    behaviour = np.full((16, 4), 0.25)
    return simulate(env, critic, behaviour, 512, seed, follow, every=128)


def test_rows_every_interval_with_the_values_figures() -> None:
    rows = _run(0, follow=True)
    assert [r["env_steps"] for r in rows] == [128, 256, 384, 512]
    for row in rows:
        assert 0.0 <= row["values_right_share"] <= 1.0
        assert row["optimum"] == 1.0 and row["greedy_value"] <= 1.0
        assert row["q_error"] >= 0.0 and row["q_error_gamma"] >= 0.0
        assert 0.0 <= row["right_share_gamma"] <= 1.0 and row["least_visits"] >= 1
    assert len(rows[-1]["state_values"]) == len(rows[-1]["state_q_gamma"]) == 16
    assert sum(rows[-1]["state_visits"]) == 512
    plays = np.array(rows[-1]["move_plays"])
    assert plays.shape == (16, 4) and (plays.sum(1) == rows[-1]["state_visits"]).all()
    bands = rows[-1]["error_by_plays"]  # the values' error by how often each move was played
    assert sum(b["moves"] for b in bands) == int((plays[plays.sum(1) > 0] >= 0).sum())
    assert _run(0, follow=True) == rows  # one seed, one run


def test_blackjack_runs_on_its_exact_table_with_noisy_rewards() -> None:
    """Blackjack's table (280 states, sticking paid +1, 0 or -1) drives the same simulation: the
    values learn that sticking on 20 beats hitting it from sampled, noisy outcomes."""
    table = BlackjackTable()
    torch.manual_seed(0)
    critic = offline_critic(torch.eye(280), 2, n_steps=1, seed=0)
    rows = simulate(table, critic, np.full((280, 2), 0.5), 2048, 0, follow=False, every=1024)
    assert [r["env_steps"] for r in rows] == [1024, 2048]
    assert rows[-1]["optimum"] == pytest.approx(-0.0466, abs=5e-4)
    values = np.array(rows[-1]["state_values"])
    hard_20 = [
        i for i, (total, _, usable) in enumerate(table.observations) if (total, usable) == (20, 0)
    ]
    assert (values[hard_20, 0] > values[hard_20, 1]).mean() >= 0.8  # stick on a hard 20


def test_plot_draws_one_panel_per_behaviour(tmp_path: Path) -> None:
    key = {"task": "FrozenLake-v1", "n_steps": 3, "cut": True, "dueling": False}
    rows = [{**key, **r, "seed": 0, "behaviour": "target"} for r in _run(0, follow=True)]
    rows += [{**key, **r, "seed": 0, "behaviour": "uniform"} for r in _run(0, follow=False)]
    path = plot(rows, tmp_path / "offline.png")
    assert path.stat().st_size > 10_000


def test_following_the_values_moves_the_behaviour() -> None:
    still, moved = _run(1, follow=False), _run(1, follow=True)
    assert {r["behaviour_value"] for r in still} == {still[0]["behaviour_value"]}
    assert len({r["behaviour_value"] for r in moved}) > 1


def test_a_floor_keeps_every_move_in_a_committed_behaviour() -> None:
    env = gym.make("FrozenLake-v1", is_slippery=False)

    def behaviour_values(least: float) -> list[float]:
        torch.manual_seed(0)
        critic = offline_critic(torch.eye(16), 4, n_steps=1, seed=0)
        always_right = np.tile([0.01, 0.01, 0.97, 0.01], (16, 1))
        rows = simulate(env, critic, always_right, 256, 0, True, every=128, least=least)
        return [r["behaviour_value"] for r in rows]

    # no reward is seen, so the values stay 0 and only the floor moves the behaviour
    assert behaviour_values(0.0) == [behaviour_values(0.0)[0]] * 2
    assert behaviour_values(0.2)[0] != behaviour_values(0.0)[0]
    assert with_floor(np.array([0.5, 0.5]), 0.0).tolist() == [0.5, 0.5]
    assert np.isclose(with_floor(np.array([0.9, 0.1, 0.0]), 0.2), [0.56, 0.24, 0.2]).all()
    with pytest.raises(ValueError, match="--floor in"):
        with_floor(np.array([0.5, 0.5]), 0.5)


def test_dueling_head_centres_the_action_part() -> None:
    head = DuelingHead(8, 3)
    head.calibrate(torch.randn(20, 8))
    x = torch.randn(2, 8)
    value_and_advantages = head.net((x - head.centre) / head.scale)
    advantages = value_and_advantages[:, 1:]
    expected = value_and_advantages[:, :1] + advantages - advantages.mean(-1, keepdim=True)
    assert head(x).shape == (2, 3)
    torch.testing.assert_close(head(x), expected)


def test_replay_ratio_and_critic_settings_reach_the_critic() -> None:
    import argparse

    import pytest

    from benchmarks.studies.q_values_offline import critic_setting, setting_name
    from gym_llm.rl.ppo.q_critic import Q_DEFAULTS

    settings = dataclasses.replace(Q_DEFAULTS, target_update_interval=25)
    critic = offline_critic(torch.eye(16), 4, 1, 0, replay_ratio=16, settings=settings)
    fit = td_fit(critic)
    assert fit.replay_ratio == 16 and fit.settings.target_update_interval == 25
    env = gym.make("FrozenLake-v1", is_slippery=False)
    simulate(env, critic, np.full((16, 4), 0.25), 128, 0, follow=False, every=128)
    assert fit.td_steps == 128 * 16 // Q_DEFAULTS.batch_size
    assert critic_setting("learning_rate_decay=0") == ("learning_rate_decay", 0.0)
    with pytest.raises(argparse.ArgumentTypeError, match="DQNConfig field"):
        critic_setting("refresh=25")
    row = {"n_steps": 1, "cut": 0.0, "dueling": False, "replay_ratio": 32.0,
           "critic": {"target_update_interval": 25.0}, "gamma": 0.95, "zero_start": True}  # fmt: skip
    assert setting_name(row) == "n=1 replay 32 target_update_interval=25"
    assert setting_name({**row, "gamma": 0.9, "gap_increase": 0.5}).endswith(" gamma 0.9 gap 0.5")
    # rows recorded before the options existed replayed each step 8 times, discounted by 0.99,
    # from the head's random start
    assert (
        setting_name({"n_steps": 3, "cut": 1.0, "dueling": False})
        == "n=3 cut 1 replay 8 gamma 0.99 random start"
    )
    assert offline_critic(torch.eye(16), 4, 1, 0).gamma == 0.95  # PPO's default


def test_held_counts_need_the_gap_closed_at_the_budget_and_at_twice_it() -> None:
    from benchmarks.studies.q_values_offline import held_counts

    base = {"task": "t", "behaviour": "target", "n_steps": 1, "cut": 0.0, "dueling": False,
            "replay_ratio": 16.0, "gamma": 0.95, "zero_start": True, "optimum": 1.0}  # fmt: skip
    curves = {0: (0.95, 1.0), 1: (0.95, 0.5), 2: (0.2, 0.95)}  # only seed 0 holds
    rows = [
        {**base, "seed": seed, "env_steps": steps, "behaviour_greedy_value": value}
        for seed, values in curves.items()
        for steps, value in zip((2, 4), values, strict=True)
    ]
    rows.append({**rows[0], "behaviour": "uniform"})  # not a run that follows the values
    assert held_counts(rows, {"t": 0.0}, budget=2) == {("t", "n=1"): (1, 3)}
    # the gap is measured from the random return: from 0.6, 0.95 closes only 87.5 % of it
    assert held_counts(rows[:2], {"t": 0.6}, budget=2) == {("t", "n=1"): (0, 1)}


def test_floor_balance_plays_the_least_played_moves_more() -> None:
    table = BlackjackTable()  # two moves, 280 states: settled states leave one move rare

    def least_played_share(balance: float) -> float:
        torch.manual_seed(0)
        critic = offline_critic(torch.eye(280), 2, n_steps=1, seed=0)
        rows = simulate(
            table, critic, np.full((280, 2), 0.5), 4096, 0, True, every=4096, least=0.05,
            floor_balance=balance,
        )  # fmt: skip
        plays = np.array(rows[-1]["move_plays"], dtype=float)
        live = plays.sum(1) >= 20
        return float((plays[live].min(1) / plays[live].sum(1)).mean())

    # measured 0.234 against 0.183: the floor's mass moves to each state's less played move
    assert least_played_share(2.0) > 1.15 * least_played_share(0.0)


def test_close_counts_and_shortfall_read_the_behaviours_greedy_value() -> None:
    from benchmarks.studies.q_values_offline import held_counts, mean_shortfall

    base = {"task": "t", "behaviour": "target", "n_steps": 1, "cut": 0.0, "dueling": False,
            "replay_ratio": 16.0, "gamma": 0.95, "zero_start": True, "optimum": 1.0}  # fmt: skip
    curves = {0: (0.95, 0.99), 1: (0.97, 0.93)}  # both hold 90 %; only seed 0 is within 5 %
    rows = [
        {**base, "seed": seed, "env_steps": steps, "behaviour_greedy_value": value}
        for seed, values in curves.items()
        for steps, value in zip((2, 4), values, strict=True)
    ]
    assert held_counts(rows, {"t": 0.0}, budget=2) == {("t", "n=1"): (2, 2)}
    assert held_counts(rows, {"t": 0.0}, budget=2, share=0.95) == {("t", "n=1"): (1, 2)}
    assert mean_shortfall(rows, 4) == {("t", "n=1"): pytest.approx(0.04)}


def test_ridge_fitted_values_are_q_star_with_no_penalty_and_flat_with_a_huge_one() -> None:
    from benchmarks.studies.q_values_offline import ridge_fitted_values
    from gym_llm.rl.dqn.replay import TextReplayBuffer

    # state 0: move 0 pays 1 and ends, move 1 leads to state 1; state 1: move 0 pays 0.5, move 1
    # pays 0, both end. Every (state, move) played once per row of four envs.
    replay = TextReplayBuffer(40, n_envs=4, n_actions=2)
    for _ in range(10):
        replay.add(["0", "0", "1", "1"], ["0", "1", "1", "1"], np.array([0, 1, 0, 1]),
                   np.array([1.0, 0.0, 0.5, 0.0]), np.array([True, False, True, True]),
                   np.zeros(4, bool), np.full((4, 2), 0.5))  # fmt: skip
    features = torch.eye(2)
    exact = ridge_fitted_values(replay, features, 2, gamma=0.9, alpha=1e-9)
    np.testing.assert_allclose(exact, [[1.0, 0.45], [0.5, 0.0]], atol=1e-6)
    flat = ridge_fitted_values(replay, features, 2, gamma=0.9, alpha=1e9)
    np.testing.assert_allclose(flat[0], flat[1], atol=1e-6)  # every state the move's mean
    np.testing.assert_allclose(flat[0], [0.75, 0.0 + 0.9 * 0.75 / 2], atol=1e-3)


def test_values_fitted_in_closed_form_drive_the_behaviour_to_the_goal() -> None:
    from benchmarks.studies.q_values_offline import fit_in_closed_form

    env = gym.make("FrozenLake-v1", is_slippery=False)
    torch.manual_seed(0)
    features = torch.eye(16)  # every state told apart: the fit can be exact
    critic = fit_in_closed_form(offline_critic(features, 4, n_steps=1, seed=0), features, 4, 1e-4)
    rows = simulate(env, critic, np.full((16, 4), 0.25), 2048, 0, True, every=1024, least=0.05)
    assert rows[-1]["greedy_value"] == pytest.approx(1.0)  # the values' greedy walk: the goal
    assert td_fit(critic).td_steps == 0  # no TD step was taken
    q = critic.values([str(s) for s in range(16)])
    assert q.shape == (16, 4) and np.isfinite(q).all()
