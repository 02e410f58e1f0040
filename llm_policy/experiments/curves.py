"""Time-to-target: speed and learning judged together.

A faster ``learn()`` matters only if the agent still learns, and a better final return matters
less if it takes ten times the wall clock. So every learning curve (gym_llm's and SB3's) is
summarised by when it *first* reaches a target return: in env steps and in training wall time
(evaluation excluded).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Reached:
    """Where a learning curve first reached its target."""

    env_steps: int
    #: Training wall time at that point (NaN where the curve did not record it).
    wall_s: float


def time_to_target(curve: Sequence[Sequence[float]], target: float) -> Reached | None:
    """The first ``(env_steps, return[, wall_s])`` point of ``curve`` whose return is at least
    ``target``, or ``None`` if it never got there.

    >>> time_to_target([(0, -0.4, 0.0), (128, -0.2, 60.0), (256, -0.05, 130.0)], -0.1)
    Reached(env_steps=256, wall_s=130.0)
    >>> time_to_target([(0, 0.0), (64, 0.5)], 1.0) is None
    True
    """
    if math.isnan(target):
        raise ValueError("target must be a number, got NaN.")
    for point in curve:
        if point[1] >= target:
            wall = float(point[2]) if len(point) > 2 else math.nan
            return Reached(int(point[0]), wall)
    return None


def gap_target(random: float, optimum: float, fraction: float = 0.9) -> float:
    """The return that closes ``fraction`` of the random-to-optimum gap.

    >>> gap_target(-0.4, -0.05, 0.9)
    -0.085
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}.")
    return round(random + fraction * (optimum - random), 12)
