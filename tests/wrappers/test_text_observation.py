from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env

from gym_llm.spaces import TextObservations
from gym_llm.wrappers import ActionParserWrapper, TextObservationWrapper


class RobotEnv(gym.Env[dict[str, Any], np.ndarray]):
    """A custom env no table knows: Dict observations, Box actions."""

    observation_space = spaces.Dict(
        {
            "position": spaces.Box(-5, 5, (2,), dtype=np.float32),
            "battery": spaces.Discrete(101),
            "sensors": spaces.MultiBinary(3),
            "target": spaces.Tuple((spaces.Discrete(4), spaces.Box(0, 1, (1,), dtype=np.float32))),
        }
    )
    action_space = spaces.Box(-1, 1, (2,), dtype=np.float32)

    def __init__(self) -> None:
        self.position = np.zeros(2, dtype=np.float32)
        self.steps = 0

    def _obs(self) -> dict[str, Any]:
        return {
            "position": self.position.copy(),
            "battery": 100 - self.steps,
            "sensors": np.array([1, 0, 1], dtype=np.int8),
            "target": (2, np.array([0.5], dtype=np.float32)),
        }

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.position = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        self.steps = 0
        return self._obs(), {}

    def step(self, action: np.ndarray):
        self.position = np.clip(self.position + action, -5, 5).astype(np.float32)
        self.steps += 1
        return self._obs(), -float(np.abs(self.position).sum()), False, self.steps >= 20, {}


def test_custom_dict_env_gets_readable_text_and_numeric_actions() -> None:
    env = ActionParserWrapper(TextObservationWrapper(RobotEnv()))
    text, _ = env.reset(seed=0)
    assert "battery: 100" in text and "sensors: [1, 0, 1]" in text
    assert "target: (2, [0.5])" in text
    assert "RobotEnv" in env.observation_space.instruction
    assert env.action_space.actions is None
    _, _, _, _, info = env.step("Move by x = 0.25 and y = 3")
    assert info["action_valid"] and info["action_clipped"]
    assert np.allclose(info["action"], [0.25, 1.0])
    check_env(env, skip_render_check=True)


def test_obs_only_formatter() -> None:
    env = TextObservationWrapper(gym.make("Blackjack-v1"), formatter=lambda obs: f"sum={obs[0]}")
    text, _ = env.reset(seed=0)
    assert text.startswith("sum=")


def test_obs_info_formatter_and_instruction_override() -> None:
    def fmt(obs: Any, info: dict[str, Any]) -> str:
        return f"state {obs}, probability {info.get('prob', 1):.2f}"

    env = TextObservationWrapper(gym.make("FrozenLake-v1"), formatter=fmt, instruction="Reach G.")
    text, _ = env.reset(seed=0)
    assert text == "state 0, probability 1.00"
    assert env.observation_space.instruction == "Reach G."


def test_history_shows_last_k_steps_with_actions_and_rewards() -> None:
    env = TextObservationWrapper(gym.make("CliffWalking-v1"), history=2)
    text, _ = env.reset(seed=0)
    assert "Previous steps" not in text
    env.step(0)
    env.step(1)
    text, *_ = env.step(1)
    assert text.count("You chose:") == 2
    assert "You chose: right. Reward: -1." in text
    assert "You chose: up." not in text  # only the last two steps are kept
    assert text.splitlines()[-6] == "Now:"  # then the position line and the 4-row grid
    env.reset()
    text, *_ = env.step(0)
    assert text.count("You chose:") == 1  # history restarts with the episode


def test_text_env_passes_through() -> None:
    class Echo(gym.Env[str, int]):
        observation_space = spaces.Text(20, charset="abcé")
        action_space = spaces.Discrete(2)

        def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
            super().reset(seed=seed)
            return "abé", {}

        def step(self, action: int):
            return "cab", 1.0, True, False, {}

    env = TextObservationWrapper(Echo())
    assert env.reset()[0] == "abé"
    assert env.observation_space.contains("abé")


def test_bad_formatter_output_gets_a_clear_error() -> None:
    env = TextObservationWrapper(gym.make("Blackjack-v1"), formatter=lambda obs: "score ☃")
    with pytest.raises(ValueError, match=r"charset='☃'"):
        env.reset()
    fixed = TextObservationWrapper(gym.make("Blackjack-v1"), formatter=lambda o: "☃", charset="☃")
    assert fixed.reset()[0] == "☃"
    with pytest.raises(ValueError, match="max_length=10 is too short"):
        TextObservationWrapper(gym.make("Blackjack-v1"), max_length=10)
    long = TextObservationWrapper(
        gym.make("Blackjack-v1"), formatter=lambda o: "x" * 500, max_length=100, on_long="raise"
    )
    with pytest.raises(ValueError, match="max_length"):
        long.reset()
    wrong = TextObservationWrapper(gym.make("Blackjack-v1"), formatter=lambda o: 3)
    with pytest.raises(TypeError, match="not str"):
        wrong.reset()


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError, match="history"):
        TextObservationWrapper(gym.make("Blackjack-v1"), history=-1)
    with pytest.raises(TypeError, match="formatter"):
        TextObservationWrapper(gym.make("Blackjack-v1"), formatter="nope")


def test_observation_space_is_a_text_space() -> None:
    env = TextObservationWrapper(gym.make("CartPole-v1"))
    assert isinstance(env.observation_space, spaces.Text)
    assert isinstance(env.observation_space, TextObservations)
