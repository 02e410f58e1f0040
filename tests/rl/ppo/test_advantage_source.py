"""AdvantageSource: the estimator that replaces GAE's advantages, the running scale they are
normalised by, and the target update's per-state targets, on hand-filled buffers (no model)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from stable_baselines3.common.logger import Logger

from gym_llm.rl.ppo.advantage_source import AdvantageSource
from gym_llm.rl.ppo.advantages import critic_free_advantages, dones_from_starts
from gym_llm.rl.ppo.buffer import TextRolloutBuffer

STEPS, ENVS = 4, 2


def _buffer(rewards: np.ndarray, actions: list[int] | None = None) -> TextRolloutBuffer:
    """A finished rollout of one-token replies: observation ``s{t % 2}``, episodes of 2 steps."""
    buffer = TextRolloutBuffer(STEPS, ENVS, gamma=0.9, gae_lambda=0.95)
    for t in range(STEPS):
        buffer.add_turns(
            np.array([f"s{t % 2}"] * ENVS, dtype=object),
            ["reply"] * ENVS,
            [np.array([actions[t] if actions else 0]) for _ in range(ENVS)],
            [np.array([-0.7], dtype=np.float32) for _ in range(ENVS)],
            rewards[t],
            np.full(ENVS, float(t % 2 == 0), dtype=np.float32),
            torch.zeros(ENVS),
        )
    buffer.compute_returns_and_advantage(last_values=torch.zeros(ENVS), dones=np.ones(ENVS))
    return buffer


def _logger() -> Logger:
    return Logger(folder=None, output_formats=[])


def _rewards(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(STEPS, ENVS)).astype(np.float32)


def test_gae_keeps_the_buffers_advantages() -> None:
    buffer = _buffer(_rewards(0))
    before = buffer.advantages.copy()
    AdvantageSource("gae", None).after_rollout(buffer, np.ones(ENVS), STEPS, 8, 0.9, _logger())
    np.testing.assert_array_equal(buffer.advantages, before)


@pytest.mark.parametrize("estimator", ["rebn", "grpo", "rloo", "gigpo"])
def test_a_critic_free_estimator_replaces_them(estimator: str) -> None:
    buffer = _buffer(_rewards(1))
    gae = buffer.advantages.copy()
    dones = np.ones(ENVS)
    want = critic_free_advantages(
        estimator,
        buffer.rewards,
        dones_from_starts(buffer.episode_starts, dones),
        buffer.episode_starts,
        buffer.observations_text,
        0.9,
    )
    source = AdvantageSource(estimator, None)
    source.after_rollout(buffer, dones, STEPS, 8, 0.9, _logger())
    np.testing.assert_allclose(buffer.advantages, want, rtol=1e-6)
    assert buffer.advantages.dtype == np.float32
    assert not np.allclose(buffer.advantages, gae)


def test_the_scale_is_the_std_of_every_advantage_so_far() -> None:
    source = AdvantageSource("gae", None)
    first, second = _buffer(_rewards(2)), _buffer(3.0 * _rewards(3))
    centre, scale = source.normalisation(first, normalize=True)
    assert centre == pytest.approx(float(first.advantages.mean()), rel=1e-6)
    assert scale == pytest.approx(float(first.advantages.std()), rel=1e-5)
    centre, scale = source.normalisation(second, normalize=True)
    pooled = np.concatenate([first.advantages.ravel(), second.advantages.ravel()])
    assert centre == pytest.approx(float(second.advantages.mean()), rel=1e-6)  # this rollout's
    assert scale == pytest.approx(float(pooled.std()), rel=1e-5)  # the run's
    assert source.scale.count == pytest.approx(pooled.size, abs=1e-3)


def test_a_rollout_without_signal_is_not_amplified() -> None:
    """After a rollout with real signal, a solved rollout whose advantages are only critic noise
    stays small (per-rollout or per-minibatch normalisation would blow it up to unit scale)."""
    source, buffer = AdvantageSource("gae", None), _buffer(_rewards(5))
    rng = np.random.default_rng(0)
    buffer.advantages = rng.normal(0.0, 1.0, (64, 8)).astype(np.float32)
    _, scale = source.normalisation(buffer, normalize=True)
    assert scale == pytest.approx(1.0, abs=0.1)
    noise = rng.normal(0.0, 1e-3, (64, 8)).astype(np.float32)
    buffer.advantages = noise
    centre, scale = source.normalisation(buffer, normalize=True)
    assert np.abs((noise - centre) / scale).max() < 0.02
    assert np.abs((noise - noise.mean()) / noise.std()).max() > 1  # what a per-rollout std does
    assert source.normalisation(buffer, normalize=False) == (0.0, 1.0)


def test_non_finite_advantages_are_left_out_and_counted() -> None:
    buffer = _buffer(_rewards(4))
    buffer.advantages[1, 0] = np.nan
    source = AdvantageSource("gae", None)
    assert source.normalisation(buffer, normalize=False) == (0.0, 1.0)
    assert source.nonfinite_turns == 1
    centre, _ = source.normalisation(buffer, normalize=True)
    assert np.isfinite(centre)
    assert source.scale.count == pytest.approx(STEPS * ENVS - 1, abs=1e-3)


def test_targets_lift_the_action_with_the_higher_advantage() -> None:
    """Without action values, each observation's target comes from its played actions: in s0
    action 1 earned more than action 0, so the target moves probability onto it."""
    rewards = np.array([[1.0, 1.0], [0.0, 0.0], [-1.0, -1.0], [0.0, 0.0]], dtype=np.float32)
    buffer = _buffer(rewards, actions=[1, 0, 0, 1])
    probs = {"s0": np.array([0.5, 0.5]), "s1": np.array([0.5, 0.5])}
    logger = _logger()
    source = AdvantageSource("rebn", None)
    source.after_rollout(buffer, np.ones(ENVS), STEPS, 8, 0.9, logger)
    centre, scale = source.normalisation(buffer, normalize=True)
    targets = source.choice_targets(
        buffer, centre, scale, probs, 2, 0.1, torch.device("cpu"), logger
    )
    assert set(targets) == {"s0", "s1"}
    for target in targets.values():
        assert target.dtype == torch.float32
        assert float(target.sum()) == pytest.approx(1.0, abs=1e-5)
    assert float(targets["s0"][1]) > 0.5 > float(targets["s0"][0])
    assert "train/target_eta" in logger.name_to_value
