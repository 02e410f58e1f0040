"""Time-to-target: the first point of a curve at or above a target, in steps and wall time."""

from __future__ import annotations

import math

import pytest

from gym_llm.experiments.curves import Reached, gap_target, time_to_target


def test_first_point_at_or_above_the_target() -> None:
    curve = [(0, -1.0, 0.0), (100, 0.5, 10.0), (200, 0.4, 21.0), (300, 0.9, 33.0)]
    assert time_to_target(curve, 0.5) == Reached(100, 10.0)  # at the target counts
    assert time_to_target(curve, 0.6) == Reached(300, 33.0)  # a later dip does not matter
    assert time_to_target(curve, -2.0) == Reached(0, 0.0)  # already there before training
    assert time_to_target(curve, 1.0) is None


def test_curves_without_wall_times_still_give_steps() -> None:
    reached = time_to_target([(0, 0.0), (64, 1.0)], 1.0)
    assert reached is not None and reached.env_steps == 64 and math.isnan(reached.wall_s)


def test_gap_target() -> None:
    assert gap_target(0.0, 1.0) == 0.9
    assert gap_target(-0.396, -0.0466, 0.5) == pytest.approx(-0.2213)
    assert gap_target(-13.0, -13.0) == -13.0
    with pytest.raises(ValueError, match="fraction"):
        gap_target(0.0, 1.0, 0.0)
    with pytest.raises(ValueError, match="NaN"):
        time_to_target([(0, 0.0)], math.nan)


def test_docstring_examples() -> None:
    import doctest

    import gym_llm.experiments.curves

    assert doctest.testmod(gym_llm.experiments.curves).failed == 0
