"""Exact Blackjack evaluation agrees with Gymnasium's own env, played many times."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from gym_llm.evaluation.exact import (
    HIT,
    STICK,
    BlackjackState,
    BlackjackTable,
    TabularModel,
    blackjack_chart,
    blackjack_optimum,
    blackjack_q_values,
    blackjack_states,
    blackjack_value,
    exact_evaluation_supported,
    exact_optimum,
    exact_policy_value,
    exact_random_value,
    greedy_action_probabilities,
    greedy_hit_probabilities,
)


def _simulate(policy: Callable[[BlackjackState], int], episodes: int, seed: int = 0) -> np.ndarray:
    env = gym.make("Blackjack-v1", sab=False)
    returns = np.zeros(episodes)
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        done = False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(policy(tuple(int(x) for x in obs)))
            returns[episode] += float(reward)
            done = terminated or truncated
    return returns


@pytest.mark.parametrize(
    "name, policy",
    [
        ("always stick", lambda s: STICK),
        ("hit below 17", lambda s: HIT if s[0] < 17 else STICK),
        ("optimal", None),
    ],
)
def test_exact_value_matches_simulation(name: str, policy: Any) -> None:
    if policy is None:
        _, table = blackjack_optimum()
        policy = table.__getitem__
    returns = _simulate(policy, 30_000)
    sem = returns.std() / np.sqrt(len(returns))
    exact = blackjack_value(policy)
    assert abs(returns.mean() - exact) < 4 * sem, (name, exact, returns.mean(), sem)


def test_optimum_and_random_match_known_figures() -> None:
    assert exact_optimum("Blackjack-v1", {"sab": False}) == pytest.approx(-0.0466, abs=5e-4)
    assert exact_random_value("Blackjack-v1") == pytest.approx(-0.396, abs=1e-3)
    optimum, table = blackjack_optimum()
    # The optimum is the best: no single-state change improves it.
    for state in [(16, 10, 0), (12, 4, 0), (18, 9, 1)]:
        flipped = dict(table)
        flipped[state] = 1 - flipped[state]
        assert blackjack_value(flipped) <= optimum + 1e-12
    assert table[(11, 10, 0)] == HIT and table[(20, 10, 0)] == STICK  # basic strategy


def test_blackjack_q_values_match_the_optimum_and_hand_computed_values() -> None:
    q = blackjack_q_values()
    _, table = blackjack_optimum()
    assert set(q) == set(blackjack_states())
    assert all((HIT if hit > stick else STICK) == table[s] for s, (stick, hit) in q.items())
    # Hitting a hard 21 always busts; a hard 20 survives only an ace (to a hard 21, then stick).
    assert q[(21, 5, 0)][HIT] == pytest.approx(-1.0)
    stick_21 = q[(21, 5, 0)][STICK]
    assert q[(20, 5, 0)][HIT] == pytest.approx(stick_21 / 13 - 12 / 13)
    # Basic strategy: stick on 20 against a 10.
    assert max(q[(20, 10, 0)]) == q[(20, 10, 0)][STICK]


def test_blackjack_as_a_table_gives_the_same_values_with_the_rewards_noise() -> None:
    """The toy-text table of Blackjack and the recursion above are two computations of one
    model: the same optimum, random value and ``Q*``; sticking keeps its three outcomes."""
    table = BlackjackTable()
    model = TabularModel.of(table)
    assert model.initial.sum() == pytest.approx(1.0)
    assert model.optimum() == pytest.approx(blackjack_optimum()[0], abs=1e-12)
    assert model.value(np.full((280, 2), 0.5)) == pytest.approx(blackjack_value(lambda _: 0.5))
    q = blackjack_q_values()
    expected = np.array([q[s] for s in table.observations])
    np.testing.assert_allclose(model.q_values(), expected, atol=1e-12)
    for moves in table.P.values():
        for outcomes in moves.values():
            assert sum(p for p, *_ in outcomes) == pytest.approx(1.0)
    stick = table.P[table.observations.index((20, 10, 0))][STICK]
    assert sorted(r for _, _, r, _ in stick) == [-1.0, 0.0, 1.0]
    assert all(done and nxt == 280 for _, nxt, _, done in stick)  # the end leads to no state
    bust = table.P[table.observations.index((21, 5, 0))][HIT]  # a hard 21: every card busts
    assert [(round(p, 12), *rest) for p, *rest in bust] == [(1.0, 280, -1.0, True)]


def test_states_cover_every_decision_state_seen_in_play() -> None:
    states = set(blackjack_states())
    assert len(states) == 280
    env = gym.make("Blackjack-v1", sab=False)
    rng = np.random.default_rng(0)
    for episode in range(3000):
        obs, _ = env.reset(seed=episode)
        done = False
        while not done:
            assert tuple(int(x) for x in obs) in states
            obs, _, terminated, truncated, _ = env.step(int(rng.integers(2)))
            done = terminated or truncated


def test_stochastic_policy_and_bad_probabilities() -> None:
    mixed = blackjack_value(lambda s: 0.5)
    assert blackjack_value(lambda s: STICK) > mixed > blackjack_value(lambda s: HIT)
    with pytest.raises(ValueError, match="not in"):
        blackjack_value(lambda s: 2.0)


class _FakeAgent:
    """``predict`` like a trained agent's: hits below ``threshold``, babbles at 15."""

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold
        self.calls = 0

    def predict(self, observations: list[str], deterministic: bool = True) -> tuple[Any, None]:
        self.calls += 1
        replies = []
        for text in observations:
            total = int(text.split("totals ")[1].split(".")[0])
            if total == 15:
                replies.append("no idea")
            else:
                replies.append("hit" if total < self.threshold else "stick")
        return np.array(replies, dtype=object), None


def test_policy_value_asks_each_state_once_in_batches() -> None:
    agent = _FakeAgent(threshold=17)
    p_hit = greedy_hit_probabilities(agent, "Blackjack-v1", {"sab": False}, batch_size=100)
    assert agent.calls == 3 and len(p_hit) == 280
    assert p_hit[(12, 5, 0)] == 1.0 and p_hit[(18, 5, 0)] == 0.0
    assert p_hit[(15, 5, 0)] == 0.5  # unparseable: the wrapper would play a random action
    expected = blackjack_value(p_hit)
    assert exact_policy_value(agent, "Blackjack-v1", {"sab": False}) == pytest.approx(expected)
    chart = blackjack_chart(p_hit)
    assert "hard 12" in chart and "?" in chart and len(chart.splitlines()) == 29


def test_keyword_bandit_is_exact_with_one_question_per_target() -> None:
    class FirstOption:
        def predict(self, observations: list[str], deterministic: bool = True) -> tuple[Any, None]:
            return np.array(["apple"] * len(observations), dtype=object), None

    class Copier:
        def predict(self, observations: list[str], deterministic: bool = True) -> tuple[Any, None]:
            return np.array([o.split("Target: ")[1] for o in observations], dtype=object), None

    kb = "gym_llm/KeywordBandit-v0"
    assert exact_policy_value(FirstOption(), kb) == 0.25
    assert exact_policy_value(Copier(), kb) == 1.0
    assert exact_policy_value(FirstOption(), kb, {"options": ["apple", "pear"]}) == 0.5
    assert exact_optimum(kb) == 1.0 and exact_random_value(kb) == 0.25


def test_unsupported_envs_are_refused_with_a_pointer() -> None:
    assert exact_evaluation_supported("Blackjack-v1", {"sab": False})
    assert not exact_evaluation_supported("Blackjack-v1", {"sab": True})
    assert not exact_evaluation_supported("CartPole-v1")
    with pytest.raises(ValueError, match="Monte-Carlo"):
        exact_policy_value(_FakeAgent(17), "CartPole-v1")


# --- tabular envs (FrozenLake, Taxi, CliffWalking) ----------------------------------------------


@pytest.mark.parametrize(
    "env_id, kwargs, optimum",
    [
        ("FrozenLake-v1", {}, 0.744),
        ("FrozenLake-v1", {"is_slippery": False}, 1.0),
        ("Taxi-v4", {}, 7.93),
        ("CliffWalking-v1", {"max_episode_steps": 100}, -13.0),
    ],
)
def test_tabular_optimum_matches_known_values(
    env_id: str, kwargs: dict[str, Any], optimum: float
) -> None:
    assert exact_optimum(env_id, kwargs) == pytest.approx(optimum, abs=1e-3)


@pytest.mark.parametrize(
    "env_id, kwargs",
    [("FrozenLake-v1", {}), ("Taxi-v4", {}), ("CliffWalking-v1", {"max_episode_steps": 100})],
)
def test_tabular_value_matches_simulation(env_id: str, kwargs: dict[str, Any]) -> None:
    """A fixed stochastic policy, evaluated exactly and played 3000 times in Gymnasium."""
    env = gym.make(env_id, **kwargs)
    model = TabularModel.of(env)
    rng = np.random.default_rng(0)
    policy = rng.dirichlet(np.ones(model.reward.shape[1]) * 0.5, size=model.reward.shape[0])
    returns = np.zeros(3000)
    for episode in range(len(returns)):
        state, _ = env.reset(seed=episode)
        done = False
        while not done:
            action = int(rng.choice(len(policy[state]), p=policy[state]))
            state, reward, terminated, truncated, _ = env.step(action)
            returns[episode] += float(reward)
            done = terminated or truncated
    sem = returns.std() / np.sqrt(len(returns))
    assert abs(returns.mean() - model.value(policy)) < 4 * sem + 1e-9


def test_tabular_greedy_policy_from_replies() -> None:
    class AlwaysDown:
        def predict(self, observations: list[str], deterministic: bool = True) -> tuple[Any, None]:
            return np.array(["down"] * len(observations), dtype=object), None

    kwargs = {"is_slippery": False}
    policy = greedy_action_probabilities(AlwaysDown(), "FrozenLake-v1", kwargs)
    assert policy.shape == (16, 4) and (policy[:, 1] == 1.0).all()  # 1 = down
    # Straight down from the start ends in the bottom-left hole of the 4x4 map: return 0.
    assert exact_policy_value(AlwaysDown(), "FrozenLake-v1", kwargs) == 0.0


def test_tabular_support_needs_a_step_limit_and_default_dynamics() -> None:
    assert not exact_evaluation_supported("CliffWalking-v1")  # no step limit of its own
    assert exact_evaluation_supported("CliffWalking-v1", {"max_episode_steps": 100})
    assert not exact_evaluation_supported("Taxi-v4", {"is_rainy": True})
    with pytest.raises(ValueError, match="max_episode_steps"):
        exact_optimum("CliffWalking-v1")
