"""What one PPO update writes under ``train/*``: kept apart from the update's loop so that the
loop reads as the update, and so that the figures and their meaning are listed in one place."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.utils import explained_variance

#: ``train/NAME``: the mean over the update's passes of ``stats[KEY]`` (logged where it has any).
MEAN_FIGURES = (
    ("policy_gradient_loss", "pg"),
    ("value_loss", "value"),
    ("entropy_loss", "entropy"),
    ("approx_kl", "approx_kl"),
    ("clip_fraction", "clip_fraction"),
    ("floor_loss", "floor"),
    ("kl_ref", "kl_ref"),
)


def finite_mean(values: list[float]) -> float:
    """The mean of the finite values (a skipped step's infinite norm would hide the rest)."""
    finite = [v for v in values if np.isfinite(v)]
    return float(np.mean(finite)) if finite else float("nan")


@dataclass(frozen=True)
class UpdateState:
    """The learner's state after one update, as the log reports it."""

    clip_range: float
    ent_coef: float
    first_ratio_error: float
    early_stopped: bool
    epochs: int
    n_updates: int
    critic_warmup: bool
    skipped_steps: int
    nonfinite_turns: int
    learning_rate: float


def record_update(
    logger: Logger,
    stats: Mapping[str, list[float]],
    values: np.ndarray,
    returns: np.ndarray,
    state: UpdateState,
) -> float:
    """Log one update's figures: the passes' means (``stats``), the critic's fit to this
    rollout's ``returns``, and ``state``. Returns the mean turns per forward/backward pass."""
    for name, key in MEAN_FIGURES:
        if stats.get(key):
            logger.record(f"train/{name}", float(np.mean(stats[key])))
    logger.record("train/ent_coef", state.ent_coef)
    logger.record("train/explained_variance", float(explained_variance(values, returns)))
    # The critic's offset: explained variance cannot see a value head that is off by a
    # constant, which is what a head too slow for the returns' scale looks like.
    logger.record("train/value_offset", float(np.mean(values - returns)))
    logger.record("train/return_mean", float(np.mean(returns)))
    # Before clipping: when the value head's share is most of it, the global clip to
    # max_grad_norm shrinks the policy's step too.
    logger.record("train/grad_norm", finite_mean(stats.get("grad_norm", [])))
    logger.record("train/value_grad_norm", finite_mean(stats.get("value_grad_norm", [])))
    logger.record("train/first_ratio_error", state.first_ratio_error)
    logger.record("train/early_stopped", int(state.early_stopped))
    logger.record("train/epochs", state.epochs)
    logger.record("train/n_updates", state.n_updates, exclude="tensorboard")
    logger.record("train/clip_range", state.clip_range)
    logger.record("train/critic_warmup", int(state.critic_warmup))
    logger.record("train/skipped_steps", state.skipped_steps)
    logger.record("train/nonfinite_turns", state.nonfinite_turns)
    turns_per_pass = float(np.mean(stats.get("rows_per_pass", [float("nan")])))
    logger.record("train/turns_per_pass", turns_per_pass)
    logger.record("train/learning_rate", state.learning_rate)
    return turns_per_pass
