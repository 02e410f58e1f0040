"""Advantage estimators against hand-computed references (no model)."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces
from stable_baselines3.common.buffers import RolloutBuffer

from gym_llm.rl.ppo.advantages import (
    check_estimator,
    critic_free_advantages,
    dones_from_starts,
    episodes,
    gae,
    group_relative,
    rebn,
    returns_to_go,
)


def test_gae_matches_sb3_rollout_buffer() -> None:
    rng = np.random.default_rng(0)
    steps, n_envs = 6, 3
    rewards = rng.normal(size=(steps, n_envs)).astype(np.float32)
    values = rng.normal(size=(steps, n_envs)).astype(np.float32)
    starts = (rng.random((steps, n_envs)) < 0.3).astype(np.float32)
    last_dones = np.array([1.0, 0.0, 0.0])
    last_values = rng.normal(size=n_envs).astype(np.float32)
    buffer = RolloutBuffer(
        steps, spaces.Box(-1, 1, (1,)), spaces.Discrete(2), n_envs=n_envs, gamma=0.9, gae_lambda=0.8
    )
    buffer.rewards, buffer.values, buffer.episode_starts = rewards, values, starts
    import torch

    buffer.compute_returns_and_advantage(torch.as_tensor(last_values), last_dones)
    dones = dones_from_starts(starts, last_dones)
    advantages, returns = gae(rewards, values, dones, last_values, 0.9, 0.8)
    np.testing.assert_allclose(advantages, buffer.advantages, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(returns, buffer.returns, rtol=1e-5, atol=1e-5)


def test_returns_to_go_by_hand() -> None:
    rewards = np.array([[1.0], [2.0], [3.0], [4.0]])
    dones = np.array([[0.0], [1.0], [0.0], [0.0]])
    g = returns_to_go(rewards, dones, 0.5)
    np.testing.assert_allclose(g[:, 0], [1 + 0.5 * 2, 2, 3 + 0.5 * 4, 4])


def test_rebn_normalises_over_the_batch() -> None:
    rewards = np.array([[0.0, 1.0], [1.0, 0.0]])
    dones = np.ones_like(rewards)
    a = rebn(rewards, dones, 0.9)
    np.testing.assert_allclose(a, [[-1, 1], [1, -1]], atol=1e-5)


def test_group_relative_mean_and_leave_one_out() -> None:
    scores = [1.0, 3.0, 5.0, 7.0]
    groups = ["a", "a", "b", "c"]
    grpo = group_relative(scores, groups, "mean")
    np.testing.assert_allclose(grpo, [-1, 1, 0, 0], atol=1e-5)  # std of [1, 3] = 1
    rloo = group_relative([1.0, 2.0, 6.0], ["g"] * 3, "loo")
    np.testing.assert_allclose(rloo, [1 - 4, 2 - 3.5, 6 - 1.5])


def test_episodes_only_whole_ones() -> None:
    # env 0: [t0 t1] done at t1, [t2 t3] unfinished; env 1: started before the rollout, ends t0
    starts = np.array([[1, 0], [0, 1], [1, 0], [0, 0]], dtype=np.float32)
    dones = dones_from_starts(starts, np.array([0.0, 1.0]))
    found = episodes(dones, starts)
    assert sorted(found) == sorted([[(0, 0), (1, 0)], [(1, 1), (2, 1), (3, 1)]])


def test_grpo_groups_episodes_by_start_observation() -> None:
    # four one-step episodes per env-step: two start from "A" (rewards 1, 0), two from "B" (1, 1)
    rewards = np.array([[1.0, 0.0, 1.0, 1.0]])
    starts = np.ones_like(rewards)
    dones = np.ones_like(rewards)
    observations = np.array([["A", "A", "B", "B"]], dtype=object)
    a = critic_free_advantages("grpo", rewards, dones, starts, observations, 1.0)
    np.testing.assert_allclose(a, [[1, -1, 0, 0]], atol=1e-5)
    r = critic_free_advantages("rloo", rewards, dones, starts, observations, 1.0)
    np.testing.assert_allclose(r, [[1, -1, 0, 0]])


def test_gigpo_adds_the_step_term_of_identical_observations() -> None:
    # env 0: "S" -> "X" (reward 1 at the end); env 1: "S" -> "Y" (reward 0); both start at "S"
    rewards = np.array([[0.0, 0.0], [1.0, 0.0]])
    starts = np.array([[1.0, 1.0], [0.0, 0.0]])
    dones = np.array([[0.0, 0.0], [1.0, 1.0]])
    observations = np.array([["S", "S"], ["X", "Y"]], dtype=object)
    a = critic_free_advantages("gigpo", rewards, dones, starts, observations, 1.0)
    # episode term: returns 1 vs 0 -> +1 / -1 on every turn; step term: "S" turns have G 1 vs 0
    # -> +1 / -1, "X" and "Y" are alone -> 0
    np.testing.assert_allclose(a, [[2, -2], [1, -1]], atol=1e-5)


def test_unknown_estimator_is_named() -> None:
    assert check_estimator("rloo") == "rloo"
    with pytest.raises(ValueError, match="gae, rebn, grpo, rloo, gigpo"):
        check_estimator("ppo")
    with pytest.raises(ValueError, match="critic-free"):
        critic_free_advantages(
            "gae",
            np.zeros((1, 1)),
            np.ones((1, 1)),
            np.ones((1, 1)),
            np.array([["o"]], dtype=object),
            1.0,
        )
