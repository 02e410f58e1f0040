"""The exact model's action values: undiscounted within the horizon, or discounted."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from gym_llm.envs.tabular import TabularModel


def _lake() -> TabularModel:
    return TabularModel.of(gym.make("FrozenLake-v1", is_slippery=False))


def test_discounted_values_are_the_discounted_path_to_the_goal() -> None:
    """Not slippery, the goal 6 moves from the start: ``Q*_gamma`` of the start's best move is
    ``gamma^5`` (the reward on the sixth), of moving into the wall one step later."""
    q = _lake().q_values(0.9, sweeps=2000)
    assert np.isclose(q[0].max(), 0.9**5)
    assert np.isclose(q[0, 0], 0.9**6)  # left: stays in the corner, then 6 moves
    assert np.isclose(q[14, 2], 1.0)  # right of 14 is the goal
    assert np.allclose(q[[5, 7, 11, 12, 15]], 0.0)  # holes and the goal end the episode


def test_undiscounted_values_count_only_what_the_horizon_leaves() -> None:
    """Undiscounted, every move that keeps the goal in reach is worth 1; with 5 backups the
    start (6 moves away) cannot reach it."""
    lake = _lake()
    assert lake.q_values()[0].max() == 1.0 == lake.optimum()
    assert lake.q_values(sweeps=5)[0].max() == 0.0
    assert lake.q_values(sweeps=6)[0].max() == 1.0


def test_a_discount_outside_zero_one_is_refused() -> None:
    with pytest.raises(ValueError, match="gamma must be a discount in"):
        _lake().q_values(1.5)
