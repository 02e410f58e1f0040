"""The noisy-advantage figures: exact on-policy values, gaps and per-state signal-to-noise."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from benchmarks.studies.noisy_advantages import (
    advantage_figures,
    exact_gaps,
    on_policy_q,
    policy_figures,
)
from gym_llm.envs.tabular import TabularModel


def _chain() -> TabularModel:
    """State 0: 'go' (action 1) moves to state 1 for nothing, 'stop' (0) pays 0.3 and ends;
    state 1: 'go' pays 1 and ends, 'stop' pays 0 and ends."""
    reward = np.array([[0.3, 0.0], [0.0, 1.0]])
    cont = np.zeros((2, 2, 2))
    cont[0, 1, 1] = 1.0
    return TabularModel(reward, cont, np.array([1.0, 0.0]), horizon=2)


def test_on_policy_q_follows_the_policy_after_the_first_action() -> None:
    tabular = _chain()
    always_stop = np.array([[1.0, 0.0], [1.0, 0.0]])
    q = on_policy_q(tabular, always_stop)
    # Going from state 0 is worth what stopping in state 1 pays: 0, below stopping's 0.3.
    np.testing.assert_allclose(q, [[0.3, 0.0], [0.0, 1.0]])
    q = on_policy_q(tabular, np.array([[0.0, 1.0], [0.0, 1.0]]), gamma=0.5)
    np.testing.assert_allclose(q[0], [0.3, 0.5])
    # The optimal action at state 0 is 'go' (worth 1), but under "always stop" its exact
    # on-policy gap is negative: a trap, whatever the noise.
    best = tabular.q_values().argmax(-1)
    assert best.tolist() == [1, 1]
    np.testing.assert_allclose(exact_gaps(on_policy_q(tabular, always_stop), always_stop, best),
                               [-0.3, 1.0])  # fmt: skip


def test_advantage_figures_count_states_and_signal_to_noise() -> None:
    states = np.array([0, 0, 0, 0, 1, 1, 1])
    actions = np.array([1, 1, 0, 0, 1, 1, 1])
    advantages = np.array([1.0, 0.8, 0.1, -0.1, 0.5, 0.4, 0.6])
    gaps = np.array([0.9, 0.5])
    figures = advantage_figures(states, actions, advantages, gaps, np.array([1, 1]))
    assert figures["turns"] == 7 and figures["states_visited"] == 2
    assert figures["turns_per_state"] == 3.5
    assert figures["both_tried_share"] == 0.5  # state 1 never tried the other action
    assert figures["estimate_right_share"] == 1.0
    np.testing.assert_allclose(figures["estimated_gap_mean"], 0.9)
    # within-action spread: residuals +-0.1 four times, sqrt(0.04 / 2); se * sqrt(1/2 + 1/2)
    np.testing.assert_allclose(figures["snr_median"], 0.9 / np.sqrt(0.04 / 2))
    assert figures["exact_gap_right_share"] == 1.0


def test_policy_figures_read_entropy_and_the_greedy_share() -> None:
    tabular = _chain()
    policy = np.array([[0.5, 0.5], [0.1, 0.9]])
    figures = policy_figures(policy, np.array([1, 1]), tabular)
    np.testing.assert_allclose(figures["entropy_min"], -(0.1 * np.log(0.1) + 0.9 * np.log(0.9)))
    assert figures["min_prob"] == 0.1
    assert figures["greedy_right_share"] == 0.5  # argmax of a tie is the first action
    np.testing.assert_allclose(figures["sampling_value"], 0.5 * 0.3 + 0.5 * 0.9)


def test_a_sweep_writes_one_row_per_rollout(tiny_model_dir: Path, tmp_path: Path) -> None:
    from benchmarks.recipes.family_sweep import main

    rows = tmp_path / "rows.jsonl"
    main(["run", "--tasks", "weather-p0-s0", "--seeds", "0", "--arms", "defaults",
          "--model", str(tiny_model_dir), "--n-envs", "2", "--n-steps", "4", "--batch-size", "8",
          "--steps", "16", "--every", "8", "--noise-figures", "--jsonl", str(rows)])  # fmt: skip
    noise = [json.loads(line) for line in (tmp_path / "rows.noise.jsonl").read_text().splitlines()]
    assert [r["env_steps"] for r in noise] == [8, 16]  # one per rollout of 2 envs x 4 steps
    assert all(r["turns"] == 8 and r["task"] == "weather-p0-s0" for r in noise)
    assert all(0.0 <= r["entropy_mean"] <= np.log(2) + 1e-9 for r in noise)


def test_summarize_averages_windows_per_task_and_arm(capsys: object) -> None:
    from benchmarks.studies.noisy_advantages import SUMMARY, summarize

    def row(steps: int, seed: int, value: float, arm: str = "a") -> dict[str, object]:
        return {"task": "t", "arm": arm, "seed": seed, "env_steps": steps,
                **{name: value for name in SUMMARY}, "snr_median": None}  # fmt: skip

    rows = [row(64, 0, 0.2), row(64, 1, 0.4), row(600, 0, 1.0), row(64, 0, 0.0, arm="b")]
    table = summarize(rows, [512, 1024])
    assert [(t["arm"], t["window"], t["seeds"]) for t in table] == [
        ("a", "1-512", 2), ("a", "513-1024", 1), ("b", "1-512", 1)]  # fmt: skip
    assert table[0]["entropy_mean"] == 0.3 and table[0]["snr_median"] is None


def test_a_q_critic_run_adds_its_values_figures(tiny_model_dir: Path, tmp_path: Path) -> None:
    from benchmarks.recipes.family_sweep import main

    rows = tmp_path / "rows.jsonl"
    main(["run", "--tasks", "weather-p0-s0", "--seeds", "0",
          "--arms", "q:ppo.advantage_estimator=q,ppo.policy_update=target",
          "--model", str(tiny_model_dir), "--n-envs", "2", "--n-steps", "4", "--batch-size", "8",
          "--steps", "16", "--every", "8", "--noise-figures", "--jsonl", str(rows)])  # fmt: skip
    noise = [json.loads(line) for line in (tmp_path / "rows.noise.jsonl").read_text().splitlines()]
    shares = [r["replay_pairs_share"] for r in noise]
    assert 0 < shares[0] <= shares[1] <= 1  # the replay only grows
    assert all(0.0 <= r["values_right_share"] <= 1.0 for r in noise)


def test_value_figures_count_pairs_and_greedy_values() -> None:
    from benchmarks.studies.noisy_advantages import value_figures

    q = np.array([[0.0, 1.0], [2.0, 1.0], [0.0, 0.5]])
    optimal = np.array([[False, True], [False, True], [False, True]])
    figures = value_figures(q, optimal, {(0, 0), (0, 1), (2, 1)})
    assert figures == {"values_right_share": 2 / 3, "replay_pairs_share": 0.5}


def test_right_shares_count_every_optimal_action() -> None:
    from benchmarks.studies.noisy_advantages import optimal_actions, value_figures

    # state 0 has two equally good actions; the values pick the second, which is right
    q_star = np.array([[0.9, 0.9, 0.1], [0.2, 0.8, 0.8]])
    optimal = optimal_actions(q_star)
    assert optimal.tolist() == [[True, True, False], [False, True, True]]
    q = np.array([[0.1, 0.5, 0.2], [0.9, 0.3, 0.4]])
    assert value_figures(q, optimal, set())["values_right_share"] == 0.5  # state 1 is wrong


def test_the_policy_is_right_on_either_tied_action() -> None:
    # one state, two actions that both pay 1 at once
    tabular = TabularModel(np.array([[1.0, 1.0]]), np.zeros((1, 2, 1)), np.array([1.0]), 1)
    for policy in ([[0.9, 0.1]], [[0.1, 0.9]]):
        figures = policy_figures(np.array(policy), np.array([0]), tabular)
        assert figures["greedy_right_share"] == 1.0
