"""One TD step of a Q head on replayed steps: double Q-learning with the Huber loss.

Shared by :class:`gym_llm.DQN` and PPO's action-value critic
(:class:`~gym_llm.rl.ppo.q_critic.QCritic`), which learn ``Q(s, a)`` the same way on the same
frozen features.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from stable_baselines3.common.utils import polyak_update

from gym_llm.policy.q_head import QHead
from gym_llm.rl.dqn.replay import ReplaySample
from gym_llm.rl.dqn.targets import advantage_learning, double_q_target

#: ``observations`` -> ``(n, K)`` prior log-probs and ``(n, d)`` features.
Features = Callable[[Sequence[str]], tuple[torch.Tensor, torch.Tensor]]


@dataclass
class QHeads:
    """The online head that trains, its target copy, and the average greedy actions read."""

    online: QHead
    target: QHead
    average: QHead
    optimizer: torch.optim.Optimizer


def td_loss(q: torch.Tensor, target: torch.Tensor, huber_delta: float) -> torch.Tensor:
    """The Huber loss with threshold ``huber_delta`` (SB3's, at 1); ``inf``: half the squared
    error. Its minimiser over a noisy target is the mean only where every error stays within
    ``huber_delta``, and the median where none does.

    >>> q, target = torch.zeros(1), torch.tensor([3.0])
    >>> float(td_loss(q, target, 1.0)), float(td_loss(q, target, float("inf")))
    (2.5, 4.5)
    """
    return torch.nn.functional.huber_loss(q, target, delta=huber_delta)


def td_step(
    heads: QHeads,
    sample: ReplaySample,
    features: Features,
    *,
    alpha: float,
    beta: float,
    max_grad_norm: float,
    average_tau: float,
    gap_increase: float = 0.0,
    huber_delta: float = 1.0,
) -> tuple[float, float] | None:
    """One optimizer step of ``heads.online`` towards the double-Q target; ``(loss, mean Q)``,
    or ``None`` when the loss was not finite (the step never reaches the weights).

    ``gap_increase`` > 0 is advantage learning (:func:`~gym_llm.rl.dqn.targets.advantage_learning`):
    the target of a move below its state's best is lowered by that share of the shortfall, so
    the values' action gaps grow ``1 / (1 - gap_increase)``-fold with the greedy moves unchanged.
    """
    device = next(heads.online.parameters()).device
    _, obs_features = features(sample.observations)
    next_prior, next_features = features(sample.next_observations)
    with torch.no_grad():
        target = double_q_target(
            sample.returns.to(device), sample.discounts.to(device),
            heads.online(next_features), heads.target(next_features), next_prior, alpha, beta,
        )  # fmt: skip
        if gap_increase:
            target = advantage_learning(
                target, heads.target(obs_features), sample.actions.to(device), gap_increase
            )
    q = heads.online(obs_features).gather(-1, sample.actions.to(device)[:, None])[:, 0]
    loss = td_loss(q, target, huber_delta)
    if not torch.isfinite(loss):
        return None
    heads.optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(heads.online.parameters(), max_grad_norm)
    heads.optimizer.step()
    if average_tau < 1:
        polyak_update(heads.online.parameters(), heads.average.parameters(), average_tau)
    return loss.item(), q.mean().item()
