"""An agent built on the default model (no ``model`` in ``policy_kwargs``, as the README builds it)
saves and loads: the saved config names the model in effect, whatever the caller passed."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from gym_llm import DQN, PPO, LLMPolicy, make_text_env
from gym_llm.policy.models import DEFAULT_MODEL

BANDIT = "gym_llm/KeywordBandit-v0"


def test_ppo_on_the_default_model_saves_loads_and_continues(
    tiny_default_model: Path, tmp_path: Path, one_torch_thread: None
) -> None:
    env = make_text_env(BANDIT, n_envs=4, seed=0)
    model = PPO(LLMPolicy, env, n_steps=4, batch_size=16, seed=0, device="cpu")
    model.learn(16)
    model.save(tmp_path / "agent")
    config = json.loads((tmp_path / "agent" / "config.json").read_text())
    assert config["policy_kwargs"]["model"] == DEFAULT_MODEL

    loaded = PPO.load(tmp_path / "agent", env=env, device="cpu")
    obs = env.reset()
    with torch.no_grad():
        before, _ = model.predict(obs, deterministic=True)
        after, _ = loaded.predict(obs, deterministic=True)
    assert list(before) == list(after)
    loaded.learn(16, reset_num_timesteps=False)
    assert loaded.num_timesteps == model.num_timesteps + 16


def test_dqn_on_the_default_model_saves_and_loads(
    tiny_default_model: Path, tmp_path: Path, one_torch_thread: None
) -> None:
    env = make_text_env(BANDIT, n_envs=2, seed=0)
    model = DQN(LLMPolicy, env, learning_starts=4, seed=0, device="cpu")
    model.learn(8)
    model.save(tmp_path / "agent")
    config = json.loads((tmp_path / "agent" / "config.json").read_text())
    assert config["policy_kwargs"]["model"] == DEFAULT_MODEL
    loaded = DQN.load(tmp_path / "agent", env=env, device="cpu")
    assert loaded.num_timesteps == model.num_timesteps
