"""HighLow: the rule, the parser's info keys, exact evaluation."""

from __future__ import annotations

import gymnasium as gym
import pytest

import gym_llm  # noqa: F401  (registers gym_llm/* envs)
from gym_llm.envs.high_low import HighLowEnv, exact_success


def test_reward_follows_the_number() -> None:
    env = gym.make("gym_llm/HighLow-v0")
    obs, info = env.reset(seed=0)
    number = info["number"]
    assert obs == f"The number is {number}."
    right = "high" if number >= 5 else "low"
    _, reward, terminated, truncated, info = env.step(right)
    assert (reward, terminated, truncated, info["action_valid"]) == (1.0, True, False, True)
    env.reset(seed=0)
    _, reward, *_ = env.step("low" if right == "high" else "high")
    assert reward == 0.0
    env.reset(seed=0)
    _, reward, _, _, info = env.step("no idea")
    assert reward == 0.0 and not info["action_valid"] and info["invalid_actions"] == 1


def test_exact_success_of_fixed_policies() -> None:
    env = HighLowEnv()
    assert exact_success(lambda obs: ["low"] * len(obs), env) == 0.5
    rule = [env.answer(n) for n in env.numbers]
    assert exact_success(lambda obs: rule, env) == 1.0
    assert exact_success(lambda obs: rule, HighLowEnv(threshold=3)) == 0.8


def test_errors_name_the_fix() -> None:
    with pytest.raises(ValueError, match="threshold"):
        HighLowEnv(threshold=0)
    env = HighLowEnv()
    with pytest.raises(RuntimeError, match="reset"):
        env.step("low")
    env.reset(seed=1)
    with pytest.raises(TypeError, match="str"):
        env.step(1)
