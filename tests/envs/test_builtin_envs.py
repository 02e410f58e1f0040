"""Every built-in formatter and action-name table, on the real Gymnasium envs."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from gym_llm.spaces import TextActions, TextObservations
from gym_llm.wrappers import BUILTIN_ENVS, ActionParserWrapper, TextObservationWrapper

# env id, kwargs, expected action names (None: numeric actions), phrases the text must contain
BUILTIN_CASES: list[tuple[str, dict[str, Any], tuple[str, ...] | None, tuple[str, ...]]] = [
    ("Blackjack-v1", {"sab": False}, ("stick", "hit"), ("Your hand totals", "dealer shows")),
    ("FrozenLake-v1", {}, ("left", "down", "right", "up"), ("@", "row 0, column 0", "HFFG")),
    ("FrozenLake-v1", {"is_slippery": False}, ("left", "down", "right", "up"), ("@",)),
    ("FrozenLake8x8-v1", {}, ("left", "down", "right", "up"), ("@",)),
    ("CliffWalking-v1", {}, ("up", "right", "down", "left"), ("@CCCCCCCCCCG", "row 3, column 0")),
    (
        "Taxi-v4",
        {},
        ("south", "north", "east", "west", "pickup", "dropoff"),
        ("The taxi (@) is at row", "destination is station", "+---------+"),
    ),
    (
        "CartPole-v1",
        {},
        ("push left", "push right"),
        ("Cart position:", " m/s", "Pole angle:", "°"),
    ),
    (
        "MountainCar-v0",
        {},
        ("push left", "no push", "push right"),
        ("Car position:", "goal at 0.5"),
    ),
    ("MountainCarContinuous-v0", {}, None, ("Car velocity:",)),
    (
        "Acrobot-v1",
        {},
        ("negative torque", "no torque", "positive torque"),
        ("Upper link angle:", "Tip height:"),
    ),
    ("Pendulum-v1", {}, None, ("Pendulum angle:", "rad/s")),
]
IDS = [
    f"{case[0]}{'-' + '-'.join(f'{k}={v}' for k, v in case[1].items()) if case[1] else ''}"
    for case in BUILTIN_CASES
]


def _wrapped(env_id: str, kwargs: dict[str, Any], **obs_kwargs: Any) -> ActionParserWrapper:
    return ActionParserWrapper(TextObservationWrapper(gym.make(env_id, **kwargs), **obs_kwargs))


def test_every_table_entry_is_covered() -> None:
    covered = {type(gym.make(case[0], **case[1]).unwrapped).__name__ for case in BUILTIN_CASES}
    assert covered == set(BUILTIN_ENVS)


@pytest.mark.parametrize(("env_id", "kwargs", "names", "phrases"), BUILTIN_CASES, ids=IDS)
def test_builtin_text_is_readable_and_in_the_space(
    env_id: str, kwargs: dict[str, Any], names: tuple[str, ...] | None, phrases: tuple[str, ...]
) -> None:
    env = _wrapped(env_id, kwargs, history=2)
    assert isinstance(env.observation_space, TextObservations)
    assert isinstance(env.action_space, TextActions)
    assert env.action_space.actions == names
    assert env.observation_space.instruction and "Goal" in env.observation_space.instruction
    env.action_space.seed(0)
    text, _ = env.reset(seed=0)
    for phrase in phrases:
        assert phrase in text, (phrase, text)
    seen = [text]
    for _ in range(40):
        text, _, terminated, truncated, info = env.step(env.action_space.sample())
        assert info["action_valid"], info
        seen.append(text)
        if terminated or truncated:
            text, _ = env.reset()
            seen.append(text)
    for text in seen:
        assert env.observation_space.contains(text), text
        assert "np." not in text and "array(" not in text and "dtype" not in text


@pytest.mark.parametrize(("env_id", "kwargs", "names", "phrases"), BUILTIN_CASES, ids=IDS)
def test_check_env_passes(
    env_id: str, kwargs: dict[str, Any], names: tuple[str, ...] | None, phrases: tuple[str, ...]
) -> None:
    check_env(_wrapped(env_id, kwargs), skip_render_check=True)
    check_env(_wrapped(env_id, kwargs, history=3), skip_render_check=True)


@pytest.mark.parametrize(("env_id", "kwargs", "names", "phrases"), BUILTIN_CASES, ids=IDS)
def test_action_names_drive_the_right_env_action(
    env_id: str, kwargs: dict[str, Any], names: tuple[str, ...] | None, phrases: tuple[str, ...]
) -> None:
    env = _wrapped(env_id, kwargs)
    env.reset(seed=0)
    if names is None:
        _, _, _, _, info = env.step("Action: 0.5")  # a stated number (not any number)
        assert np.allclose(info["action"], 0.5)
        return
    for index, name in enumerate(names):
        _, _, terminated, truncated, info = env.step(name.upper())
        assert info["action"] == index and info["action_valid"]
        if terminated or truncated:
            env.reset()


def test_blackjack_text_matches_the_state() -> None:
    env = TextObservationWrapper(gym.make("Blackjack-v1", sab=False))
    text, _ = env.reset(seed=3)
    player, dealer, ace = env.unwrapped._get_obs()
    assert f"Your hand totals {player}." in text
    assert ("an ace" if dealer == 1 else f"a {dealer}.") in text
    assert ("Usable ace: yes" if ace else "Usable ace: no") in text


def test_frozenlake_agent_moves_in_the_grid() -> None:
    env = _wrapped("FrozenLake-v1", {"is_slippery": False})
    text, _ = env.reset(seed=0)
    assert text.splitlines()[1] == "@FFF"
    text, *_ = env.step("right")
    assert "row 0, column 1" in text and text.splitlines()[1] == "S@FF"
    assert "not slippery" in env.observation_space.instruction


def test_taxi_text_decodes_the_state() -> None:
    env = TextObservationWrapper(gym.make("Taxi-v4"))
    text, _ = env.reset(seed=1)
    row, col, _passenger, destination = env.unwrapped.decode(env.unwrapped.s)
    assert f"at row {row}, column {col}" in text
    grid = text.splitlines()[1:]
    assert grid[1 + row][2 * col + 1] == "@"
    assert f"station {'RGYB'[destination]}" in text
