"""The random state as JSON (no model needed): every generator comes back drawing the same."""

from __future__ import annotations

import json
import random

import gymnasium as gym
import numpy as np
import torch

from gym_llm.rl.common.run_state import (
    env_rng_states,
    generator_from_state,
    generator_state,
    global_rng_state,
    restore_env_rng_states,
    restore_global_rng_state,
)
from gym_llm.rl.common.vec_env import make_text_env


def _draws() -> tuple[float, float, float]:
    return random.random(), float(np.random.rand()), float(torch.rand(1))


def test_global_state_round_trips_through_json() -> None:
    state = json.loads(json.dumps(global_rng_state()))
    expected = _draws()
    _draws()  # move every generator on
    restore_global_rng_state(state)
    assert _draws() == expected


def test_numpy_generator_round_trips_through_json() -> None:
    generator = np.random.default_rng(7)
    generator.random(3)
    copy = generator_from_state(json.loads(json.dumps(generator_state(generator))))
    assert np.array_equal(copy.permutation(50), generator.permutation(50))


def test_env_generators_replay_the_current_episode_start() -> None:
    env = make_text_env("gym_llm/GuessNumber-v0", n_envs=2, seed=3)
    env.reset()
    for step in range(40):  # episodes end and restart with unseeded resets
        env.step(np.array([str(step % 7 + 1), "8"], dtype=object))
    secrets = [e.unwrapped._secret for e in env.envs]
    states = json.loads(json.dumps(env_rng_states(env)))
    assert all("samplers" in s and s["episode_start"] is not None for s in states)
    other = make_text_env("gym_llm/GuessNumber-v0", n_envs=2, seed=99)
    other._reset_seeds()
    assert restore_env_rng_states(other, states)
    other.reset()  # replays the reset that began each env's current episode
    assert [e.unwrapped._secret for e in other.envs] == secrets
    assert not restore_env_rng_states(make_text_env("FrozenLake-v1", n_envs=3), states)
    assert not restore_env_rng_states(gym.make("FrozenLake-v1"), states)  # not a vector env
