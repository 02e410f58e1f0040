"""The habits every SB3 user has work on wrapped text envs: evaluate_policy on one env,
DummyVecEnv([make_env]) and make_vec_env, for evaluation and for training."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv

from gym_llm import PPO
from gym_llm.wrappers import ActionParserWrapper, TextObservationWrapper

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _make() -> gym.Env[Any, Any]:
    return Monitor(ActionParserWrapper(TextObservationWrapper(gym.make("Blackjack-v1", sab=False))))


def test_evaluate_policy_on_one_wrapped_env_and_on_sb3_vec_envs(tiny_model_dir: Path) -> None:
    env = _make()
    model = PPO(
        "LLMPolicy", env, n_steps=4, batch_size=4, policy_kwargs={"model": str(tiny_model_dir)}
    )
    for target in (env, DummyVecEnv([_make, _make]), make_vec_env(_make, n_envs=2)):
        mean, std = evaluate_policy(model, target, n_eval_episodes=4)
        assert -1.0 <= mean <= 1.0 and np.isfinite(std)


def test_ppo_trains_on_a_dummy_vec_env_of_text_envs(tiny_model_dir: Path) -> None:
    venv = DummyVecEnv([_make, _make])
    observations = venv.reset()
    assert isinstance(observations, np.ndarray) and observations.dtype == object
    assert isinstance(observations[0], str)
    model = PPO(
        "LLMPolicy", venv, n_steps=2, batch_size=4, n_epochs=1,
        policy_kwargs={"model": str(tiny_model_dir)}, seed=0,
    )  # fmt: skip
    model.learn(4)
    assert model.num_timesteps == 4
