"""Policy update by regression onto a target distribution (choice mode): out of the softmax corner.

PPO's policy gradient moves an action's logit by ``p (1 - p) A``: an action the policy gives
p = 0.004 barely moves even when it is the better one, and it is almost never sampled to show it
(the "softmax corner": Blackjack's ``hit`` at 0.4 %, the state of a relational task that the
rest of the batch pushed the wrong way). Cross-entropy to a target distribution has the logit
gradient ``pi(a) - target(a)``, which is not damped when ``pi(a)`` is small and ``target(a)`` is
not. The target is the old policy tilted by the advantages (MPO / V-MPO's E-step, AWR):

    target(a | s) ∝ pi_old(a | s) · exp(A(s, a) / eta)

with ``A(s, a)`` the mean advantage of the rollout's turns that played ``a`` in observation
``s`` (0 for actions not played there: no evidence, no tilt), and ``eta`` set by bisection so
that the visit-weighted mean ``KL(target || pi_old)`` is ``kl_step`` (a step size in nats, not
in units of advantage). All of it is exact in choice mode, where the policy's whole distribution
over the listed actions is known.

The functions here are pure (NumPy / torch, no model) and tested on their own.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch


def state_action_advantages(
    observations: Sequence[str], actions: Sequence[int], advantages: np.ndarray, n_actions: int
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """``(states, A, visits)``: the distinct observations, the ``(S, K)`` mean advantage of each
    (observation, action) pair played (0 where not played) and the ``(S,)`` turns per state.

    >>> states, a, visits = state_action_advantages(["x", "y", "x"], [0, 1, 1], np.array([1.0, 2.0, 3.0]), 2)
    >>> states, a.tolist(), visits.tolist()
    (['x', 'y'], [[1.0, 3.0], [0.0, 2.0]], [2.0, 1.0])
    """
    if not len(observations) == len(actions) == len(advantages):
        raise ValueError("observations, actions and advantages must be as long as each other.")
    states = list(dict.fromkeys(observations))
    row = {s: i for i, s in enumerate(states)}
    total = np.zeros((len(states), n_actions))
    count = np.zeros((len(states), n_actions))
    for obs, action, adv in zip(observations, actions, advantages, strict=True):
        total[row[obs], int(action)] += float(adv)
        count[row[obs], int(action)] += 1
    mean = np.divide(total, count, out=np.zeros_like(total), where=count > 0)
    return states, mean, count.sum(1)


def _tilted(log_old: np.ndarray, adv: np.ndarray, eta: float) -> np.ndarray:
    logits = log_old + adv / eta
    logits -= logits.max(1, keepdims=True)
    target: np.ndarray = np.exp(logits)
    target /= target.sum(1, keepdims=True)
    return target


def _mean_kl(target: np.ndarray, log_old: np.ndarray, weights: np.ndarray) -> float:
    log_target = np.log(np.clip(target, 1e-300, None))
    kl = (target * (log_target - log_old)).sum(1)
    return float((weights * kl).sum() / weights.sum())


def target_distribution(
    log_old: np.ndarray, adv: np.ndarray, weights: np.ndarray, kl_step: float
) -> tuple[np.ndarray, float]:
    """``(target, eta)``: ``pi_old · exp(adv / eta)`` normalised per row, with ``eta`` such that
    the ``weights``-weighted mean ``KL(target || pi_old)`` is ``kl_step`` (or as close as the
    advantages allow: with every advantage 0 the target is ``pi_old`` and ``eta`` is ``inf``).

    >>> log_old = np.log(np.array([[0.996, 0.004]]))
    >>> target, eta = target_distribution(log_old, np.array([[-1.0, 0.0]]), np.ones(1), 0.05)
    >>> round(float(target[0, 1]), 3)  # the rare action: nine times its mass, in one step
    0.037
    """
    if kl_step <= 0:
        raise ValueError(f"kl_step must be > 0 nats, got {kl_step}.")
    log_old = np.asarray(log_old, dtype=np.float64)
    adv = np.asarray(adv, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    if not np.any(adv):
        return np.exp(log_old), float("inf")
    spread = float(np.abs(adv).max())
    low, high = np.log(spread) - 12.0, np.log(spread) + 12.0  # log eta: KL falls as eta grows
    if _mean_kl(_tilted(log_old, adv, float(np.exp(low))), log_old, weights) <= kl_step:
        eta = float(np.exp(low))  # the largest step the advantages allow
        return _tilted(log_old, adv, eta), eta
    for _ in range(60):
        mid = (low + high) / 2
        if _mean_kl(_tilted(log_old, adv, float(np.exp(mid))), log_old, weights) > kl_step:
            low = mid
        else:
            high = mid
    eta = float(np.exp(high))
    return _tilted(log_old, adv, eta), eta


def rollout_targets(
    observations: Sequence[str],
    actions: Sequence[int],
    advantages: np.ndarray,
    action_probs: dict[str, np.ndarray],
    n_actions: int,
    kl_step: float,
) -> tuple[dict[str, np.ndarray], float, float]:
    """``(target per observation, eta, lift)`` for a rollout's turns: :func:`target_distribution`
    from the old policy (``action_probs``, the rollout's per observation) and the normalised
    ``advantages``; ``lift`` is how much the target adds to actions the old policy held below
    0.05 (what it lifts out of the softmax corner). No turns: ``({}, nan, 0.0)``."""
    states, adv, visits = state_action_advantages(observations, actions, advantages, n_actions)
    return table_targets(states, adv, visits, action_probs, kl_step)


def table_targets(
    states: Sequence[str],
    adv: np.ndarray,
    visits: np.ndarray,
    action_probs: dict[str, np.ndarray],
    kl_step: float,
) -> tuple[dict[str, np.ndarray], float, float]:
    """:func:`rollout_targets` from an ``(S, K)`` advantage of every action in each of
    ``states``, visited ``visits`` times (action values give every action's, played or not)."""
    if not len(states):
        return {}, float("nan"), 0.0
    old = np.stack([action_probs[state] for state in states]).astype(np.float64)
    log_old = np.log(np.clip(old, 1e-300, None))
    target, eta = target_distribution(log_old, adv, visits, kl_step)
    rare = np.exp(log_old) < 0.05
    lift = float((target - np.exp(log_old))[rare].sum())
    return {state: target[i] for i, state in enumerate(states)}, eta, lift


def target_cross_entropy(log_probs: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean over rows of ``-sum_a target(a) log pi(a)``; its gradient with respect to the logits
    is ``pi - target`` per row.

    >>> logits = torch.zeros(1, 2, requires_grad=True)
    >>> target_cross_entropy(torch.log_softmax(logits, -1), torch.tensor([[0.0, 1.0]])).backward()
    >>> logits.grad.tolist()
    [[0.5, -0.5]]
    """
    return -(target.to(log_probs.dtype) * log_probs).sum(-1).mean()


def rows_on_device(table: dict[str, np.ndarray], device: torch.device) -> dict[str, torch.Tensor]:
    """Each observation's row of ``table`` as float32 on ``device``, copied there at once
    (the targets, or the rollout policy the behaviour floor's KL reads).

    >>> rows = rows_on_device({"x": np.array([0.25, 0.75])}, torch.device("cpu"))
    >>> rows["x"].dtype, rows["x"].tolist()
    (torch.float32, [0.25, 0.75])
    """
    if not table:
        return {}
    stacked = torch.as_tensor(np.stack(list(table.values())), dtype=torch.float32, device=device)
    return dict(zip(table, stacked, strict=True))
