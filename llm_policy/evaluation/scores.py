"""The one result type of an evaluation: a :class:`Score` (exact or Monte-Carlo, with its
standard error), which curves, tables and the comparison suite read."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Score:
    """How good a policy is: its expected return and how sure we are of it."""

    value: float
    #: Standard error of ``value``: 0 for an exact evaluation.
    sem: float
    #: ``"exact"`` (dynamic programming) or ``"mc"`` (Monte-Carlo over ``episodes``).
    kind: str
    episodes: int = 0
    #: Probability of ending the episode on the env's best terminal reward (reaching the goal);
    #: ``None`` where that is not defined (Blackjack, CartPole).
    success: float | None = None
