"""Action values fitted in closed form (``PPO(q_fit="ridge")``): fitted Q iteration with ridge
regression on the frozen features, instead of TD steps on an MLP head.

Where many states are each seen a few times and every outcome is noisy (Blackjack-sized
tasks), a head trained by TD steps leaves the moves a policy rarely plays underrated, and a
policy that follows its values does not play them again. A ridge fit of the same steps lends
each rarely played move its neighbours' outcomes: a linear map of the features, shrunk toward
each move's mean by as much as leave-one-out error over the (state, move) pairs says the data
bear, chosen again at every regression. No rate, no target copy, no replay draws: each fit
sweeps the targets ``r + gamma max_a Q(s', a)`` of every step held.

The math is pure NumPy and tested without a model; :class:`RidgeFit` is the part
:class:`~gym_llm.rl.ppo.q_critic.QCritic` composes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from gym_llm.policy.action_head import standardiser

#: The penalties leave-one-out chooses among (1 to 10^5 by factors of sqrt(10)).
LOO_PENALTIES = tuple(10 ** (k / 2) for k in range(11))
#: Sweeps of fitted Q iteration after each rollout, from the previous fit.
RIDGE_SWEEPS = 20


#: How the action values are fitted: TD steps on the head, or in closed form.
Q_FITS = ("td", "ridge")


def check_q_fit(fit: str, n_steps: int = 1, replay_balance: float = 0.0) -> str:
    """``q_fit`` as given, or a ``ValueError`` naming the choices; ``"ridge"`` fits one-step
    targets over every step held, so it refuses the TD head's ``q_n_steps`` and
    ``q_replay_balance`` rather than leave them silently unused."""
    if fit not in Q_FITS:
        raise ValueError(
            f"q_fit must be 'td' (the head trained by TD steps, the default) or 'ridge' (the "
            f"values fitted in closed form after each rollout), got {fit!r}."
        )
    if fit == "ridge" and (n_steps != 1 or replay_balance != 0):
        raise ValueError(
            f'q_fit="ridge" fits one-step targets over every step held, so q_n_steps '
            f"({n_steps}) and q_replay_balance ({replay_balance:g}) do not apply: leave them "
            'at 1 and 0, or use q_fit="td".'
        )
    return fit


def loo_ridge(
    xs: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    penalties: Sequence[float] = LOO_PENALTIES,
    dual: bool | None = None,
) -> tuple[np.ndarray, float, float]:
    """Weighted ridge regression of ``y`` on ``xs`` (each row weighted by ``w``, an unpenalised
    intercept) with the penalty of least leave-one-out error, exact from the hat matrix's
    diagonal: ``(coefficients, intercept, penalty)``. One eigendecomposition serves every
    penalty: of the rows' Gram matrix when there are fewer rows than features (``dual``),
    else of the features' (``None``: whichever is smaller).

    >>> x = np.array([[0.0], [1.0], [2.0], [3.0]])
    >>> beta, intercept, penalty = loo_ridge(x, 2 * x[:, 0], np.ones(4))
    >>> round(float(beta[0]), 2), round(intercept, 2), penalty  # a clean line: the least penalty
    (1.67, 0.5, 1.0)
    >>> noise = np.array([1.0, -1.0, 1.0, -1.0])
    >>> loo_ridge(x, noise, np.ones(4))[2] > 100  # nothing to fit: shrunk to the mean
    True
    """
    mean = float(np.average(y, weights=w))
    centre = np.average(xs, axis=0, weights=w)
    z = np.sqrt(w)[:, None] * (xs - centre)
    t = np.sqrt(w) * (y - mean)
    if dual is None:
        dual = z.shape[0] <= z.shape[1]
    if dual:  # S = U diag(lam / (lam + penalty)) U^T over the rows
        lam, u = np.linalg.eigh(z @ z.T)
        rows, coords = u, u.T @ t
    else:  # the same S from the features' side: Z V diag(1 / (lam + penalty)) V^T Z^T
        lam, v = np.linalg.eigh(z.T @ z)
        kept = lam > 1e-12 * max(float(lam.max()), 1e-300)  # directions the rows span
        lam, v = lam[kept], v[:, kept]
        rows = (z @ v) / np.sqrt(lam)
        coords = rows.T @ t
    lam = np.maximum(lam, 0.0)
    errors = []
    for penalty in penalties:
        shrink = lam / (lam + penalty)
        residual = t - rows @ (shrink * coords)
        hat = np.minimum((rows**2) @ shrink, 1 - 1e-9)
        errors.append(float(((residual / (1 - hat)) ** 2).sum()))
    penalty = penalties[int(np.argmin(errors))]
    if dual:
        beta = z.T @ (u @ (coords / (lam + penalty)))
    else:
        beta = v @ (np.sqrt(lam) * coords / (lam + penalty))
    return beta, mean - float(centre @ beta), penalty


def fitted_q(
    x: np.ndarray,
    steps: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    n_actions: int,
    gamma: float,
    sweeps: int,
    start: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """``sweeps`` sweeps of fitted Q iteration: each regresses ``r + gamma max_a Q(s', a)`` on
    the features ``x`` (``(n, d)``, one row per observation) of each move's (state, move) pairs,
    weighted by their plays, by :func:`loo_ridge`. ``steps`` is ``(s, a, r, s', ended)``, indices
    into ``x`` (``ended``: a terminal step, not bootstrapped); ``start`` the ``(n, K)`` values
    the first sweep bootstraps from. ``(weights (d, K), bias (K), penalties chosen)``; a move
    never played keeps weights 0 and bias 0.
    """
    s, a, r, nxt, ended = steps
    weights, bias = np.zeros((x.shape[1], n_actions)), np.zeros(n_actions)
    chosen = [float("nan")] * n_actions
    q = start
    for _ in range(sweeps):
        target = r + gamma * np.where(ended, 0.0, q[nxt].max(-1))
        for move in range(n_actions):
            mine = a == move
            if not mine.any():
                continue
            plays = np.bincount(s[mine], minlength=len(x)).astype(np.float64)
            seen = plays > 0
            sums = np.bincount(s[mine], weights=target[mine], minlength=len(x))[seen]
            weights[:, move], bias[move], chosen[move] = loo_ridge(
                x[seen], sums / plays[seen], plays[seen]
            )
        q = x @ weights + bias
    return weights, bias, chosen


class RidgeQ(nn.Module):
    """``(n, d)`` features -> ``(n, K)`` action values, a linear map of the standardised
    features (the centre and scale set once, as :class:`~gym_llm.policy.q_head.QHead`'s are).
    Its weights are set by :class:`RidgeFit`, not by gradients."""

    def __init__(self, hidden: int, n_actions: int, device: torch.device | str | None = None):
        super().__init__()
        self.register_buffer("centre", torch.zeros(hidden, device=device))
        self.register_buffer("scale", torch.ones(hidden, device=device))
        self.register_buffer("calibrated", torch.zeros((), dtype=torch.bool, device=device))
        self.register_buffer("weights", torch.zeros(hidden, n_actions, device=device))
        self.register_buffer("bias", torch.zeros(n_actions, device=device))

    def standardise(self, features: torch.Tensor) -> torch.Tensor:
        centre, scale = self.centre, self.scale
        assert isinstance(centre, torch.Tensor) and isinstance(scale, torch.Tensor)
        return (features.float() - centre) / scale

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        weights, bias = self.weights, self.bias
        assert isinstance(weights, torch.Tensor) and isinstance(bias, torch.Tensor)
        return self.standardise(features) @ weights + bias

    @property
    def is_calibrated(self) -> bool:
        return bool(self.calibrated)

    @torch.no_grad()
    def calibrate(self, features: torch.Tensor) -> None:
        """Set the input's centre and scale from ``(n, d)`` features of distinct observations."""
        centre, scale = standardiser(features.float())
        self.centre.copy_(centre)  # type: ignore[operator]
        self.scale.copy_(scale)  # type: ignore[operator]
        self.calibrated.fill_(True)  # type: ignore[operator]


class RidgeFit:
    """The action values refitted after each rollout from every step the replay holds.

    Args:
        hidden: the features' size.
        n_actions: the listed actions.
        gamma: the values' discount.
        sweeps: sweeps of fitted Q iteration per fit, from the previous fit's values.
        device: where the values live.
    """

    def __init__(
        self,
        hidden: int,
        n_actions: int,
        gamma: float,
        sweeps: int = RIDGE_SWEEPS,
        device: torch.device | str | None = None,
    ) -> None:
        if sweeps < 1:
            raise ValueError(f"sweeps must be >= 1, got {sweeps}.")
        self.q_net = RidgeQ(hidden, n_actions, device=device)
        self.n_actions, self.gamma, self.sweeps = n_actions, gamma, sweeps

    @torch.no_grad()
    def train(
        self, replay: Any, features: Any, num_timesteps: int = 0, new_steps: int = 0
    ) -> dict[str, float]:
        """Refit the values to the steps ``replay`` holds (a
        :class:`~gym_llm.rl.dqn.replay.TextReplayBuffer`), reading each observation's frozen
        features once from ``features`` (``observations -> (prior, features)``). The run's
        ``num_timesteps`` and ``new_steps``, which TD steps are paced by, do not change a fit
        of every step held."""
        held = replay.held_rows
        valid = replay.valid[:held].ravel()
        if not valid.any():
            return {}
        observations = [str(o) for o in replay.observations[:held].ravel()[valid]]
        nexts = [str(o) for o in replay.next_observations[:held].ravel()[valid]]
        texts = list(dict.fromkeys(observations + nexts))
        index = {text: i for i, text in enumerate(texts)}
        raw = features(texts)[1]
        if not self.q_net.is_calibrated:
            self.q_net.calibrate(raw[: len(dict.fromkeys(observations))])
        x = self.q_net.standardise(raw).double().cpu().numpy()
        start = self.q_net(raw).double().cpu().numpy()
        steps = (
            np.array([index[o] for o in observations]),
            replay.actions[:held].ravel()[valid],
            replay.rewards[:held].ravel()[valid].astype(np.float64),
            np.array([index[o] for o in nexts]),
            replay.terminated[:held].ravel()[valid],
        )
        weights, bias, chosen = fitted_q(x, steps, self.n_actions, self.gamma, self.sweeps, start)
        self.q_net.weights.copy_(torch.from_numpy(weights))  # type: ignore[operator]
        self.q_net.bias.copy_(torch.from_numpy(bias))  # type: ignore[operator]
        played = [c for c in chosen if not math.isnan(c)]
        return {
            "q_mean": float((x @ weights + bias).mean()),
            "q_ridge_penalty": float(np.mean(played)) if played else math.nan,
        }

    def state_dict(self) -> dict[str, Any]:
        """The fitted values (the next fit starts from them)."""
        return {"ridge": self.q_net.state_dict()}

    def load_state_dict(self, state: dict[str, Any], resume: bool) -> None:
        """The fitted values; ``resume`` changes nothing (a fit holds no sampling state)."""
        self.q_net.load_state_dict(state["ridge"])
