"""Exploration vs learning figures against hand-computed values (no model)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gym_llm.rl.common.diagnostics import (
    choice_diagnostics,
    distinct,
    entropy,
    input_ignored,
    mutual_information,
    observation_key,
    sampled_diagnostics,
)


def test_entropy_by_hand() -> None:
    assert entropy(np.array([0.5, 0.5])) == pytest.approx(math.log(2))
    assert entropy(np.array([1.0, 0.0])) == pytest.approx(0.0)


def test_distinct_weights_by_frequency() -> None:
    probs = np.array([[0.9, 0.1], [0.2, 0.8], [0.9, 0.1]])
    keys, dists, weights = distinct(["a", "b", "a"], probs)
    assert keys == ["a", "b"]
    np.testing.assert_allclose(dists, [[0.9, 0.1], [0.2, 0.8]])
    np.testing.assert_allclose(weights, [2 / 3, 1 / 3])


def test_mutual_information_zero_when_the_input_is_ignored_and_max_when_it_decides() -> None:
    same = np.array([[0.5, 0.5], [0.5, 0.5]])
    assert mutual_information(same, np.array([0.5, 0.5])) == pytest.approx(0.0, abs=1e-9)
    decided = np.array([[1.0, 0.0], [0.0, 1.0]])
    assert mutual_information(decided, np.array([0.5, 0.5])) == pytest.approx(math.log(2))


def test_choice_diagnostics_tracks_greedy_changes_since_first_seen() -> None:
    first: dict[str, int] = {}
    out = choice_diagnostics(["a", "b"], np.array([[0.9, 0.1], [0.9, 0.1]]), first)
    key = observation_key
    assert out["greedy_changed"] == 0.0 and first == {key("a"): 0, key("b"): 0}
    assert len(key("a" * 10_000)) == 16  # a long observation costs a short key
    assert out["mutual_information"] == pytest.approx(0.0, abs=1e-9)
    out = choice_diagnostics(["a", "b", "c"], np.array([[0.9, 0.1], [0.1, 0.9], [0.3, 0.7]]), first)
    assert out["greedy_changed"] == pytest.approx(0.5)  # b flipped, a did not; c is new
    assert first[key("c")] == 1
    assert out["distinct_observations"] == 3.0
    expected_h = (entropy(np.array([0.9, 0.1])) * 2 + entropy(np.array([0.3, 0.7]))) / 3
    assert out["state_entropy"] == pytest.approx(expected_h)


def test_committed_share_counts_states_that_stopped_trying_an_action() -> None:
    probs = np.array([[0.995, 0.005, 0.0], [0.5, 0.5, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])
    # rows 1-2 are two-action states padded to three columns: padding is not a rare action
    out = choice_diagnostics(["a", "b", "b", "c"], probs, {})
    assert out["committed_share"] == pytest.approx(1 / 3)  # a; b once, however often seen
    assert out["turns_per_observation"] == pytest.approx(4 / 3)


def test_input_ignored_is_committed_and_uninformed_only() -> None:
    def figures(probs: list[list[float]]) -> dict[str, float]:
        return choice_diagnostics([f"s{i}" for i in range(len(probs))], np.array(probs), {})

    collapsed = figures([[0.99, 0.01], [0.99, 0.01], [0.99, 0.01]])
    assert input_ignored(collapsed, 2)
    exploring = figures([[0.5, 0.5], [0.5, 0.5]])  # the same everywhere, but still exploring
    assert not input_ignored(exploring, 2)
    decided = figures([[0.99, 0.01], [0.01, 0.99]])  # committed, and the input decides
    assert not input_ignored(decided, 2)
    assert not input_ignored(figures([[0.99, 0.01]]), 2)  # one observation says nothing


def test_sampled_diagnostics_count_each_observations_replies() -> None:
    # "a" seen 3 times (2 x action 0, 1 x action 1), "b" once (action 1): weights 3/4 and 1/4.
    out = sampled_diagnostics(["a", "a", "b", "a"], [0, 0, 1, 1], 3)
    h_a = -(2 / 3) * math.log(2 / 3) - (1 / 3) * math.log(1 / 3)
    assert out["state_entropy"] == pytest.approx(0.75 * h_a)
    marginal = -(0.5 * math.log(0.5)) * 2  # actions 0 and 1 each half of the replies
    assert out["mutual_information"] == pytest.approx(marginal - 0.75 * h_a)
    assert out["distinct_observations"] == 2.0
    assert out["input_ignored"] == 0.0  # "a" mostly 0, "b" 1
    same = sampled_diagnostics(["a", "b", "c"], [2, 2, 2], 3)
    assert same["mutual_information"] == 0.0 and same["state_entropy"] == 0.0
    assert same["input_ignored"] == 1.0  # every observation got the same parsed action


def test_sampled_alarm_survives_a_stray_reply_but_not_a_tie_or_exploration() -> None:
    # A collapse as the held-out threshold task showed it: "sell" (1) in all ten states, one
    # stray "buy" (0). The plug-in mutual information is above input_ignored's threshold.
    observations = [str(s) for s in range(10) for _ in range(6)]
    actions = [1] * 60
    actions[3] = 0
    collapsed = sampled_diagnostics(observations, actions, 2)
    assert collapsed["mutual_information"] > 0.01 * math.log(2)
    assert not input_ignored(collapsed, 2) and collapsed["input_ignored"] == 1.0
    tie = sampled_diagnostics(["a", "a", "b"], [0, 1, 0], 2)  # "a" is a tie: no shared answer
    assert tie["input_ignored"] == 0.0
    exploring = sampled_diagnostics(["a", "a", "a", "b", "b", "b"], [0, 0, 1, 0, 0, 1], 2)
    assert exploring["state_entropy"] > 0.5 * math.log(2) and exploring["input_ignored"] == 0.0
    assert sampled_diagnostics(["a", "a"], [1, 1], 2)["input_ignored"] == 0.0  # one observation
