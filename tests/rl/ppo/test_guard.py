"""The NaN guard (issue 17, item 4): a non-finite reward, advantage, loss or gradient never
reaches the weights; skipped steps are counted, and a run that keeps failing stops with an error
that names the cause and the last checkpoint."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from gym_llm import PPO, make_text_env
from gym_llm.rl.ppo.guard import NonFiniteTrainingError
from tests.builders import small_ppo, td_fit
from tests.models import tiny_model_fixture

WORDS = ["apple", "banana", "cherry", "grape"]


model_dir = tiny_model_fixture("model_dir", WORDS)


class NanReward(gym.Wrapper[Any, Any, Any, Any]):
    """Returns a NaN reward on the ``at``-th step."""

    def __init__(self, env: gym.Env[Any, Any], at: int) -> None:
        super().__init__(env)
        self.at, self.steps = at, 0

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        return obs, math.nan if self.steps == self.at else reward, terminated, truncated, info


def _ppo(model_dir: Path, env: Any = None, **kwargs: Any) -> PPO:
    return small_ppo(
        model_dir, env or "gym_llm/KeywordBandit-v0", n_steps=4, batch_size=4, n_epochs=1,
        learning_rate=3e-3, **kwargs,
    )  # fmt: skip


def _finite(model: PPO) -> bool:
    return all(torch.isfinite(p).all() for p in model.policy.parameters())


def _trainable(model: PPO) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.policy.trainable_state_dict().items()}


@pytest.mark.parametrize("estimator", ["gae", "q"])
def test_nan_reward_costs_its_turns_not_the_weights(model_dir: Path, estimator: str) -> None:
    """With the action values too: the step stays out of their replay's draws and sums."""
    from gym_llm.envs.keyword_bandit import KeywordBanditEnv

    env = make_text_env(lambda: NanReward(KeywordBanditEnv(), at=3), n_envs=1, seed=0)
    model = _ppo(model_dir, env, advantage_estimator=estimator)
    before = _trainable(model)
    with pytest.warns(RuntimeWarning, match="non-finite reward"):
        model.learn(4)
    assert _finite(model)
    assert model.nonfinite_turns == 1  # one-step episodes: only the NaN turn itself
    assert model.skipped_steps == 0  # the other turns trained
    assert any(not torch.equal(before[k], v) for k, v in _trainable(model).items())
    if estimator == "q":
        fit = td_fit(model.q_critic)
        assert fit.td_steps > 0 and fit.skipped_steps == 0
        assert all(torch.isfinite(p).all() for p in fit.q_net.parameters())


def test_inf_advantage_is_left_out(model_dir: Path) -> None:
    model = _ppo(model_dir, advantage_estimator="gae")  # poisons GAE's advantages
    buffer = model.rollout_buffer
    compute = buffer.compute_returns_and_advantage

    def poisoned(*args: Any, **kwargs: Any) -> None:
        compute(*args, **kwargs)
        buffer.advantages[0, 0] = np.inf

    buffer.compute_returns_and_advantage = poisoned
    model.learn(8)
    assert _finite(model) and model.nonfinite_turns == 1 and model.skipped_steps == 0
    assert np.isfinite(model.advantage_scale.var)


def test_poisoned_gradient_skips_the_step(model_dir: Path) -> None:
    model = _ppo(model_dir)
    param = next(p for n, p in model.policy.named_parameters() if "lora_B" in n)
    calls = {"n": 0}

    def poison_first(grad: torch.Tensor) -> torch.Tensor:
        calls["n"] += 1
        return grad * math.nan if calls["n"] == 1 else grad

    param.register_hook(poison_first)
    before = _trainable(model)
    with pytest.warns(RuntimeWarning, match="Skipped an optimizer step: non-finite gradient"):
        model.learn(8)  # one rollout of 8 turns: two minibatches of 4, the first poisoned
    assert model.skipped_steps == 1 and model._n_updates == 1
    assert _finite(model)
    assert any(not torch.equal(before[k], v) for k, v in _trainable(model).items())


def test_persistent_nan_stops_with_the_cause_and_last_checkpoint(
    model_dir: Path, tmp_path: Path
) -> None:
    model = _ppo(model_dir, max_consecutive_skips=3)
    model.learn(8)
    model.save(tmp_path / "good")
    good = _trainable(model)
    param = next(p for n, p in model.policy.named_parameters() if "lora_B" in n)
    param.register_hook(lambda grad: grad * math.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(NonFiniteTrainingError, match=r"3 optimizer steps in a row.*gradient"):
            model.learn(64, reset_num_timesteps=False)
    with pytest.raises(NonFiniteTrainingError, match=str(tmp_path / "good")):
        model.train()
    assert model.skipped_steps >= 3
    now = _trainable(model)
    assert all(torch.equal(good[k], now[k]) for k in good)  # not one bad step got through


def test_max_consecutive_skips_is_checked(model_dir: Path) -> None:
    with pytest.raises(ValueError, match="max_consecutive_skips must be >= 1"):
        _ppo(model_dir, max_consecutive_skips=0)
