"""What an update logs: the passes' means, the critic's fit, and the learner's state, with a
skipped step's infinite norm kept out of the mean. No model needed."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from stable_baselines3.common.logger import KVWriter, Logger

from gym_llm.rl.ppo.update_log import MEAN_FIGURES, UpdateState, finite_mean, record_update


class _Kept(KVWriter):
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.excluded: list[dict[str, Any]] = []

    def write(self, key_values: dict[str, Any], key_excluded: Any, step: int = 0) -> None:
        self.rows.append(dict(key_values))
        self.excluded.append(dict(key_excluded))

    def close(self) -> None:
        pass


def _state(**changes: Any) -> UpdateState:
    fields: dict[str, Any] = {
        "clip_range": 0.2,
        "ent_coef": 0.01,
        "first_ratio_error": 0.0,
        "early_stopped": False,
        "epochs": 4,
        "n_updates": 12,
        "critic_warmup": False,
        "skipped_steps": 1,
        "nonfinite_turns": 0,
        "learning_rate": 3e-4,
    }
    return UpdateState(**{**fields, **changes})


def _logged(stats: dict[str, list[float]], **changes: Any) -> tuple[dict[str, Any], float, Any]:
    writer = _Kept()
    logger = Logger(folder=None, output_formats=[writer])
    values, returns = np.array([0.0, 1.0, 2.0]), np.array([0.5, 1.5, 2.5])
    per_pass = record_update(logger, stats, values, returns, _state(**changes))
    logger.dump(0)
    return writer.rows[0], per_pass, writer.excluded[0]


def test_finite_mean_skips_infinite_norms_and_is_nan_when_none_are_finite() -> None:
    assert finite_mean([1.0, math.inf, 3.0]) == 2.0
    assert math.isnan(finite_mean([math.inf, math.nan]))
    assert math.isnan(finite_mean([]))


def test_means_are_logged_for_the_figures_the_passes_filled_and_only_those() -> None:
    row, _, _ = _logged({"pg": [1.0, 3.0], "approx_kl": [0.01, 0.03], "rows_per_pass": [8, 8]})
    assert row["train/policy_gradient_loss"] == 2.0
    assert math.isclose(row["train/approx_kl"], 0.02)
    absent = {f"train/{name}" for name, key in MEAN_FIGURES if key not in ("pg", "approx_kl")}
    assert absent.isdisjoint(row)


def test_critic_fit_and_state_are_logged() -> None:
    row, per_pass, excluded = _logged(
        {"grad_norm": [2.0, math.inf], "rows_per_pass": [16, 8]}, early_stopped=True, epochs=2
    )
    assert row["train/value_offset"] == -0.5  # values sit 0.5 under the returns
    assert row["train/explained_variance"] == 1.0  # an offset explains all the variance
    assert row["train/return_mean"] == 1.5
    assert row["train/grad_norm"] == 2.0
    assert math.isnan(row["train/value_grad_norm"])
    assert row["train/early_stopped"] == 1 and row["train/epochs"] == 2
    assert row["train/skipped_steps"] == 1 and row["train/learning_rate"] == 3e-4
    assert per_pass == 12.0 and row["train/turns_per_pass"] == 12.0
    assert excluded["train/n_updates"] == ("tensorboard",)
