from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from gym_llm import make_text_env
from gym_llm.rl.common.vec_env import TextVecEnv


def test_text_vec_env_steps_and_auto_resets() -> None:
    env = make_text_env("Blackjack-v1", n_envs=3, env_kwargs={"sab": False}, seed=0)
    obs = env.reset()
    assert obs.dtype == object and obs.shape == (3,) and all(isinstance(o, str) for o in obs)
    episodes = 0
    for _ in range(20):
        obs, _, dones, infos = env.step(np.array(["stick"] * 3, dtype=object))
        assert dones.all()  # sticking ends a Blackjack hand
        for info in infos:
            assert "Your hand totals" in info["terminal_observation"]
            assert "episode" in info  # SB3 Monitor statistics
            assert info["action_valid"]
        episodes += len(infos)
    assert episodes == 60 and all("Your hand totals" in o for o in obs)


def test_seeding_is_reproducible() -> None:
    first = make_text_env("FrozenLake-v1", n_envs=2, seed=5).reset()
    second = make_text_env("FrozenLake-v1", n_envs=2, seed=5).reset()
    assert list(first) == list(second)


def test_non_text_env_gets_a_clear_error() -> None:
    with pytest.raises(TypeError, match="ActionParserWrapper\\(TextObservationWrapper\\(env\\)\\)"):
        TextVecEnv([lambda: gym.make("CartPole-v1")])


def test_truncation_is_flagged() -> None:
    env = make_text_env("CliffWalking-v1", n_envs=1, env_kwargs={"max_episode_steps": 3})
    env.reset()
    for _ in range(3):
        _, _, dones, infos = env.step(np.array(["up"], dtype=object))
    assert dones[0] and infos[0]["TimeLimit.truncated"]


def test_make_text_env_honours_wrapper_kwargs_on_text_native_envs() -> None:
    from gym_llm.rl.common.vec_env import make_text_env

    plain = make_text_env("gym_llm/KeywordBandit-v0")
    assert plain.envs[0].observation_space.instruction != "Pick the target."
    env = make_text_env(
        "gym_llm/KeywordBandit-v0",
        observation_kwargs={"instruction": "Pick the target.", "max_length": 500},
        action_kwargs={"parser": lambda text: text.strip().lower()},
    )
    space = env.envs[0].observation_space
    assert space.instruction == "Pick the target." and space.max_length == 500
    env.reset()
    _, _, _, infos = env.step(np.array(["  GRAPE "], dtype=object))
    assert infos[0]["action_text"] == "  GRAPE " and infos[0]["action"] == "grape"
    with pytest.raises(ValueError, match="action_names only applies to Discrete"):
        make_text_env("gym_llm/KeywordBandit-v0", action_kwargs={"action_names": ["a"]})
