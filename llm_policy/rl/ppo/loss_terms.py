"""PPO's loss terms as pure functions of tensors: no model, no buffer, testable by hand.

Every function takes per-token tensors of shape ``(n, T)`` with a ``mask`` of the same shape (1 for
an action token, 0 for padding) or per-turn tensors of shape ``(n,)``. Token means are over the
masked tokens of the whole batch, as in TRL (each token of a reply counts once; a long reply
weighs more than a short one, which is what makes the loss a sum over sampled tokens).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SurrogateTerms:
    """The clipped surrogate and the figures PPO logs about it (detached floats)."""

    loss: torch.Tensor
    ratio: torch.Tensor
    approx_kl: float
    clip_fraction: float
    max_ratio_error: float


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` over ``mask`` (``(values * mask).sum() / mask.sum()``, 0 if empty)."""
    return (values * mask).sum() / mask.sum().clamp(min=1)


def clipped_surrogate(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_range: float,
) -> SurrogateTerms:
    """PPO's clipped objective per action token, each token weighted by its turn's advantage.

    Naive form (Schulman et al. 2017, eq. 7), with ``r = exp(log_probs - old_log_probs)``::

        loss = -mean_tokens(min(r * A, clip(r, 1 - eps, 1 + eps) * A))

    ``advantages`` is ``(n,)`` (one per turn) and broadcast over the turn's tokens.
    ``approx_kl`` is the k3 estimator of KL(old || new), ``mean((r - 1) - log r)``
    (http://joschu.net/blog/kl-approx.html), as SB3 and CleanRL log it; ``clip_fraction`` is the
    share of tokens whose ratio left the clip range; ``max_ratio_error`` is ``max |r - 1|``, which
    invariant 1 requires to be ~0 on an update's first minibatch.
    """
    log_ratio = (log_probs - old_log_probs) * mask
    ratio = torch.exp(log_ratio)
    adv = advantages.to(log_probs.dtype).unsqueeze(-1)
    surrogate = torch.min(ratio * adv, torch.clamp(ratio, 1 - clip_range, 1 + clip_range) * adv)
    loss = -masked_mean(surrogate, mask)
    with torch.no_grad():
        approx_kl = float(masked_mean((ratio - 1) - log_ratio, mask))
        clip_fraction = float(masked_mean(((ratio - 1).abs() > clip_range).float(), mask))
        error = ((ratio - 1).abs() * mask).max() if mask.numel() else torch.zeros(())
    return SurrogateTerms(loss, ratio, approx_kl, clip_fraction, float(error))


def value_loss(
    values: torch.Tensor,
    returns: torch.Tensor,
    old_values: torch.Tensor | None = None,
    clip_range: float | None = None,
) -> torch.Tensor:
    """Mean squared error of the critic, optionally clipped around the rollout's values.

    Naive form: ``mean((V - R)^2)``. With ``clip_range`` (PPO2's value clipping, as in SB3's
    ``clip_range_vf`` and CleanRL's ``clip_vloss``)::

        V_clipped = V_old + clip(V - V_old, -eps, eps)
        loss = mean(max((V - R)^2, (V_clipped - R)^2))
    """
    returns = returns.to(values.dtype)
    error = (values - returns) ** 2
    if clip_range is None:
        return error.mean()
    if old_values is None:
        raise ValueError("value clipping needs old_values (the values the rollout stored).")
    old = old_values.to(values.dtype)
    clipped = old + torch.clamp(values - old, -clip_range, clip_range)
    return torch.max(error, (clipped - returns) ** 2).mean()


def k3_kl(log_probs: torch.Tensor, ref_log_probs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """KL(policy || reference) per token with the k3 estimator, averaged over tokens.

    Naive form, with ``d = ref_log_probs - log_probs`` on tokens sampled from the policy::

        kl = mean_tokens(exp(d) - d - 1)

    Unbiased and never negative (http://joschu.net/blog/kl-approx.html); TRL's ``kl_penalty="k3"``.
    """
    delta = (ref_log_probs - log_probs) * mask
    return masked_mean(torch.exp(delta) - delta - 1, mask)


def listed_kl(old_probs: torch.Tensor, log_probs: torch.Tensor) -> float:
    """KL(old || new) over the listed actions, exact per turn and averaged over turns, for
    ``(n, K)`` old probabilities and new log-probs. The k3 estimate is noisy and needs actions
    drawn from the old policy; where the update holds the whole distributions (the target
    update, whose rollout may draw from a floor) this reads them instead.

    >>> old = torch.tensor([[0.5, 0.5], [1.0, 0.0]])
    >>> round(listed_kl(old, torch.log(torch.tensor([[0.9, 0.1], [0.5, 0.5]]))), 4)
    0.602
    """
    with torch.no_grad():
        old = old_probs.to(log_probs.dtype)
        log_old = torch.log(old.clamp(min=torch.finfo(old.dtype).tiny))
        per_turn = torch.where(old > 0, old * (log_old - log_probs), torch.zeros_like(old))
        return float(per_turn.sum(-1).mean()) if per_turn.numel() else 0.0


def entropy_bonus(entropy: torch.Tensor) -> torch.Tensor:
    """The entropy term of the loss: ``-mean(H)`` (minimising it raises the entropy); 0 for
    no rows (a batch of replies none of which names an action)."""
    return -entropy.mean() if entropy.numel() else entropy.sum()


def probability_floor(log_probs: torch.Tensor, floor: float) -> torch.Tensor:
    """The floor term of the loss (``PPO(min_action_prob=...)``): the mean over rows of
    ``sum_k max(0, log floor - log p_k)`` for ``(rows, K)`` action log-probs; 0 for no rows.

    A log-barrier, not an entropy bonus, because of where it pulls: its gradient on the logit of
    an action below the floor is ``-(1 - p)``, about 1 however rare the action, where the
    entropy's is ``-p (log p + H)``, which vanishes with ``p`` (the softmax corner). It is 0, and
    so leaves the policy alone, once every action has at least ``floor``.

    >>> lp = torch.log(torch.tensor([[0.99, 0.01], [0.5, 0.5]]))
    >>> round(float(probability_floor(lp, 0.05)), 4)  # log(0.05 / 0.01) / 2 rows
    0.8047
    >>> float(probability_floor(lp, 0.005))
    0.0
    """
    if not log_probs.numel():
        return log_probs.sum()
    return torch.relu(math.log(floor) - log_probs).sum(-1).mean()
