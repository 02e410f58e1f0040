from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gym_llm import make_text_env
from gym_llm.evaluation.monte_carlo import evaluate, known_optimum, random_baseline


class _Scripted:
    """A stand-in agent for ``evaluate_policy``: names the target, or replies nonsense."""

    def __init__(self, answer_target: bool) -> None:
        self.answer_target = answer_target

    def predict(
        self,
        observation: Any,
        state: Any = None,
        episode_start: Any = None,
        deterministic: bool = True,
    ) -> tuple[np.ndarray, None]:
        replies = [
            str(o).split("Target: ")[1].rstrip(".") if self.answer_target else "???"
            for o in observation
        ]
        return np.array(replies, dtype=object), None


def test_evaluate_reports_returns_sem_and_invalid_rate() -> None:
    env = make_text_env("gym_llm/KeywordBandit-v0", n_envs=3, seed=0)
    perfect = evaluate(_Scripted(True), env, n_episodes=20)
    assert perfect.mean == 1.0 and perfect.sem == 0.0 and perfect.episodes == 20
    assert perfect.invalid_action_rate == 0.0 and perfect.steps == 20
    lost = evaluate(_Scripted(False), env, n_episodes=10)
    assert lost.mean == 0.0 and lost.invalid_action_rate == 1.0
    assert "95% CI" in str(perfect)
    with pytest.raises(ValueError, match="n_episodes"):
        evaluate(_Scripted(True), env, n_episodes=0)


def test_random_baseline_and_known_optima() -> None:
    stats = random_baseline("gym_llm/KeywordBandit-v0", episodes=2000)
    assert abs(stats.mean - 0.25) < 4 * stats.sem  # 4 options
    assert known_optimum("gym_llm/KeywordBandit-v0") == 1.0
    assert known_optimum("Blackjack-v1", {"sab": False}) == pytest.approx(-0.0466, abs=5e-4)
    assert known_optimum("CartPole-v1") is None
