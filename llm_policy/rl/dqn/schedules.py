"""The Q head's rate over a run, in env steps rather than in SB3's progress of one ``learn`` call.

SB3's schedules read the progress of the current ``learn`` call, so a run trained in pieces
(``learn(n, reset_num_timesteps=False)`` again and again) restarts them each time, and a schedule
tied to a budget needs the budget. A harmonic decay needs neither: after ``t`` env steps the
values are (like a sample mean) an average over ever more replayed returns.
"""

from __future__ import annotations


def harmonic_rate_factor(env_steps: int, decay: int) -> float:
    """``1 / (1 + env_steps / decay)``: 1 at the start, 1/2 after ``decay`` env steps, 1/3 after
    twice that; 1 throughout when ``decay`` is 0 (a constant rate)."""
    if decay < 0 or env_steps < 0:
        raise ValueError(f"Need env_steps >= 0 and decay >= 0, got {env_steps} and {decay}.")
    if decay == 0:
        return 1.0
    return 1.0 / (1.0 + env_steps / decay)
