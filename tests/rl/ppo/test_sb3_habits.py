"""The habits every SB3 user has work on wrapped text envs: evaluate_policy on one env,
DummyVecEnv([make_env]) and make_vec_env, for evaluation and for training."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
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


def test_sb3_file_names_load_the_saved_directory(tiny_model_dir: Path, tmp_path: Path) -> None:
    from stable_baselines3.common.callbacks import CheckpointCallback

    env = DummyVecEnv([_make])
    model = PPO(
        "LLMPolicy", env, n_steps=4, batch_size=4, n_epochs=1,
        policy_kwargs={"model": str(tiny_model_dir)}, seed=0,
    )  # fmt: skip
    model.learn(8, callback=CheckpointCallback(save_freq=4, save_path=str(tmp_path / "ckpt")))
    # SB3's callback saves "<prefix>_<steps>_steps.zip": gym_llm writes the directory without
    # ".zip", and loading takes the name SB3 printed.
    saved = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    assert saved == ["rl_model_4_steps", "rl_model_8_steps"]
    loaded = PPO.load(tmp_path / "ckpt" / "rl_model_8_steps.zip", device="cpu")
    assert loaded.num_timesteps == 8
    model.save(tmp_path / "agent.zip")
    for name in ("agent", "agent.zip"):
        assert PPO.load(tmp_path / name, device="cpu").num_timesteps == 8
    with pytest.raises(FileNotFoundError, match="not a gym_llm agent directory"):
        PPO.load(tmp_path / "missing.zip")


def test_an_agent_of_a_nameless_model_object_saves_its_base_weights(tmp_path: Path) -> None:
    from gym_llm.testing import make_tiny_model, make_tiny_tokenizer

    tokenizer = make_tiny_tokenizer(["stick", "hit"])
    model = PPO(
        "LLMPolicy", DummyVecEnv([_make]), n_steps=4, batch_size=4, n_epochs=1, seed=0,
        policy_kwargs={"model": make_tiny_model(len(tokenizer)), "tokenizer": tokenizer},
    )  # fmt: skip
    model.learn(4)
    model.save(tmp_path / "agent")
    loaded = PPO.load(tmp_path / "agent", device="cpu")
    prompt = _make().reset(seed=3)[0]
    for policy in (model.policy, loaded.policy):
        policy.set_training_mode(False)
    with torch.no_grad():
        ours, theirs = model.policy.act([prompt]), loaded.policy.act([prompt])
    assert ours.action_probs is not None and theirs.action_probs is not None
    assert np.array_equal(ours.action_probs, theirs.action_probs)
