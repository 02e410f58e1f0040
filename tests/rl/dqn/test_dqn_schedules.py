"""The harmonic decay of the Q head's rate: its values, and its refusal of negative steps."""

from __future__ import annotations

import pytest

from gym_llm.rl.dqn.schedules import harmonic_rate_factor


def test_the_rate_halves_after_decay_env_steps_and_thirds_after_twice_that() -> None:
    assert harmonic_rate_factor(0, 1000) == 1.0
    assert harmonic_rate_factor(1000, 1000) == pytest.approx(0.5)
    assert harmonic_rate_factor(2000, 1000) == pytest.approx(1 / 3)
    assert harmonic_rate_factor(250, 1000) == pytest.approx(0.8)


def test_zero_decay_is_a_constant_rate() -> None:
    assert harmonic_rate_factor(0, 0) == harmonic_rate_factor(10**9, 0) == 1.0


def test_negative_steps_or_decay_are_refused() -> None:
    with pytest.raises(ValueError, match="decay >= 0"):
        harmonic_rate_factor(10, -1)
    with pytest.raises(ValueError, match="env_steps >= 0"):
        harmonic_rate_factor(-1, 10)
