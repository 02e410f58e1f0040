"""Regression onto a tilted target (choice mode): the pure math without a model, then PPO with
``policy_update="target"`` on a tiny model."""

from __future__ import annotations

import doctest
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from stable_baselines3.common.logger import Logger

import gym_llm.rl.ppo.target_update as target_update
from benchmarks.cli_args import keeping
from gym_llm import PPO, LLMPolicy, make_text_env
from gym_llm.rl.ppo.target_update import (
    rollout_targets,
    state_action_advantages,
    target_cross_entropy,
    target_distribution,
)
from tests.builders import small_ppo
from tests.models import tiny_model_fixture


def _kl(p: np.ndarray, log_q: np.ndarray, w: np.ndarray) -> float:
    return float((w * (p * (np.log(p) - log_q)).sum(1)).sum() / w.sum())


def test_the_docstring_examples_hold() -> None:
    assert doctest.testmod(target_update).failed == 0


def test_advantages_are_averaged_per_state_and_action() -> None:
    obs = ["a", "b", "a", "a", "b"]
    states, adv, visits = state_action_advantages(obs, [0, 2, 0, 1, 2], np.arange(5.0), 3)
    assert states == ["a", "b"]
    np.testing.assert_allclose(adv, [[1.0, 3.0, 0.0], [0.0, 0.0, 2.5]])  # (0+2)/2, 3; (1+4)/2
    np.testing.assert_allclose(visits, [3, 2])
    with pytest.raises(ValueError, match="as long as"):
        state_action_advantages(obs, [0], np.zeros(5), 3)


def test_the_target_takes_a_step_of_kl_step_nats_towards_the_better_action() -> None:
    rng = np.random.default_rng(0)
    log_old = np.log(rng.dirichlet(np.ones(3), size=6))
    adv = rng.normal(size=(6, 3))
    weights = rng.integers(1, 5, size=6).astype(float)
    for step in (0.01, 0.05, 0.2):
        target, eta = target_distribution(log_old, adv, weights, step)
        np.testing.assert_allclose(target.sum(1), 1.0)
        assert _kl(target, log_old, weights) == pytest.approx(step, rel=1e-6)
        # the tilt is exp(adv / eta): ratios to the old policy ordered as the advantages
        ratio = np.log(target) - log_old
        np.testing.assert_allclose(ratio - ratio[:, :1], (adv - adv[:, :1]) / eta, atol=1e-8)
    same, eta = target_distribution(log_old, np.zeros((6, 3)), weights, 0.05)
    np.testing.assert_allclose(same, np.exp(log_old))
    assert eta == float("inf")
    with pytest.raises(ValueError, match="kl_step"):
        target_distribution(log_old, adv, weights, 0.0)


def test_a_rollouts_targets_lift_what_the_old_policy_cornered() -> None:
    probs = {"a": np.array([0.99, 0.01]), "b": np.array([0.5, 0.5])}
    targets, eta, lift = rollout_targets(
        ["a", "a", "b"], [1, 0, 0], np.array([2.0, -1.0, 0.5]), probs, 2, kl_step=0.05
    )
    assert set(targets) == {"a", "b"} and eta > 0
    assert targets["a"][1] > 0.01  # the rewarded rare action gains ...
    assert lift == pytest.approx(targets["a"][1] - 0.01)  # ... and that is the lift
    assert rollout_targets([], [], np.zeros(0), probs, 2, kl_step=0.05)[0] == {}


def test_a_small_advantage_gives_the_largest_step_it_allows() -> None:
    log_old = np.log(np.array([[0.5, 0.5]]))
    target, _ = target_distribution(log_old, np.array([[1e-9, 0.0]]), np.ones(1), 10.0)
    assert target[0, 0] > 0.99  # KL of 10 nats is out of reach: as far as the tilt goes


def test_the_cross_entropy_gradient_is_pi_minus_target() -> None:
    logits = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    target = torch.softmax(torch.randn(4, 3, dtype=torch.float64), -1)
    target_cross_entropy(torch.log_softmax(logits, -1), target).backward()
    assert logits.grad is not None
    expected = (torch.softmax(logits, -1) - target) / 4
    torch.testing.assert_close(logits.grad, expected.detach())


def test_a_cornered_better_action_moves_far_more_than_under_the_policy_gradient() -> None:
    # p(better) = 0.004; the common action was played and did badly (advantage -1).
    p = np.array([[0.996, 0.004]])
    target, _ = target_distribution(np.log(p), np.array([[-1.0, 0.0]]), np.ones(1), 0.05)
    target_push = target[0, 1] - p[0, 1]  # the logit gradient's size on the better action
    pg_push = p[0, 0] * p[0, 1] * 1.0  # d/dlogit_better of -A log pi(common) = p_c p_b |A|
    assert target_push > 5 * pg_push


model_dir = tiny_model_fixture("model_dir", ["low", "high"])


def _ppo(model_dir: Path, **kwargs: Any) -> PPO:
    return small_ppo(model_dir, "gym_llm/HighLow-v0", n_steps=8, batch_size=16, **kwargs)


def test_ppo_steps_onto_the_target_and_saves_the_setting(model_dir: Path, tmp_path: Path) -> None:
    model = _ppo(model_dir, policy_update="target", kl_step=0.1)
    seen: dict[str, float] = {}
    before = {n: p.detach().clone() for n, p in model.policy.named_parameters()}
    logger = Logger(folder=None, output_formats=[])
    logger.record = keeping(logger.record, ("target_eta",), seen)
    model.set_logger(logger)
    model.learn(32)
    assert model.first_ratio_error < 1e-5  # the rollout's log-probs are still the update's
    assert 0 < seen["target_eta"] < float("inf")
    changed = [n for n, p in model.policy.named_parameters() if not torch.equal(p, before[n])]
    assert any("lora_" in n or n.startswith("action_head") for n in changed)
    model.save(tmp_path / "agent")
    saved = json.loads((tmp_path / "agent" / "config.json").read_text())["hyperparameters"]
    assert saved["policy_update"] == "target" and saved["kl_step"] == 0.1
    loaded = PPO.load(tmp_path / "agent", device="cpu")
    assert loaded.policy_update == "target" and loaded.kl_step == 0.1


def test_bad_settings_are_refused(model_dir: Path) -> None:
    with pytest.raises(ValueError, match="'clip', 'target' or 'auto'"):
        _ppo(model_dir, policy_update="mpo")
    with pytest.raises(ValueError, match="kl_step must be > 0"):
        _ppo(model_dir, policy_update="target", kl_step=0)
    env = make_text_env("gym_llm/GuessNumber-v0", n_envs=1, seed=0)
    with pytest.raises(ValueError, match="needs choice mode"):
        PPO(LLMPolicy, env, policy_update="target", device="cpu",
            policy_kwargs={"model": str(model_dir), "action_mode": "generate"})  # fmt: skip
