"""Long text never crashes an episode: observations over max_length are cut and counted."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest
from gymnasium import spaces

from gym_llm.text import cut_middle
from gym_llm.wrappers import TextObservationWrapper


class Echo(gym.Env[str, str]):
    """Echoes each reply back, as text games do: the observation grows with the replies."""

    def __init__(self) -> None:
        self.observation_space = spaces.Text(100_000)
        self.action_space = spaces.Text(100_000)
        self.seen = "RULES: reply with words."

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self.seen = "RULES: reply with words."
        return self.seen, {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.seen += "\nYou said: " + action
        return self.seen, 0.0, False, False, {}


def test_cut_middle_keeps_head_and_tail_within_the_limit() -> None:
    text = "HEAD" + "x" * 10_000 + "TAIL"
    cut = cut_middle(text, 500)
    assert len(cut) <= 500 and cut.startswith("HEAD") and cut.endswith("TAIL")
    assert "characters cut" in cut
    assert cut_middle("short", 500) == "short"


def test_an_echoing_game_runs_past_max_length_and_counts_the_cuts() -> None:
    env = TextObservationWrapper(Echo(), max_length=2000)
    text, info = env.reset(seed=0)
    assert not info["observation_truncated"]
    for _ in range(5):
        text, _, _, _, info = env.step("word " * 200)  # 1,000 characters echoed back each time
    assert info["observation_truncated"] and len(text) <= 2000
    assert text.startswith("RULES") and text.endswith("word ")
    assert env.truncated_observations >= 3


def test_raise_policy_still_available() -> None:
    env = TextObservationWrapper(Echo(), max_length=2000, on_long="raise")
    env.reset(seed=0)
    with pytest.raises(ValueError, match="more than max_length"):
        for _ in range(5):
            env.step("word " * 200)
