"""PPO's loss on one pass of turns, as one pure function of the policy's evaluation, the rollout's
numbers and the settings: what ``PPO.train`` minimises, readable in one place (its terms are in
:mod:`gym_llm.rl.ppo.loss_terms`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gym_llm.policy.outputs import Evaluation
from gym_llm.rl.ppo.entropy_control import floor_loss, held_entropy
from gym_llm.rl.ppo.loss_terms import (
    SurrogateTerms,
    clipped_surrogate,
    entropy_bonus,
    k3_kl,
    value_loss,
)
from gym_llm.rl.ppo.target_update import target_cross_entropy


@dataclass(frozen=True)
class LossSettings:
    """The coefficients of one update (``ent_coef`` moves between steps under ``"auto"``)."""

    clip_range: float
    clip_range_vf: float | None
    vf_coef: float
    ent_coef: float
    #: ``ent_coef="auto"``: the entropy held is the decision's among listed actions.
    adaptive_entropy: bool
    min_action_prob: float
    kl_coef: float


@dataclass(frozen=True)
class LossTerms:
    """The loss and what PPO logs and steers by."""

    loss: torch.Tensor
    policy: torch.Tensor
    value: torch.Tensor
    entropy: torch.Tensor
    surrogate: SurrogateTerms
    #: ``(rows, K)`` log-probs of the listed actions, or ``None`` (``target_entropy_of="marginal"``).
    listed: torch.Tensor | None
    floor: torch.Tensor | None
    kl_ref: torch.Tensor | None


def ppo_loss(
    ev: Evaluation,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    old_values: torch.Tensor,
    settings: LossSettings,
    *,
    value_scale: float = 1.0,
    targets: torch.Tensor | None = None,
    ref_log_probs: torch.Tensor | None = None,
) -> LossTerms:
    """The loss of one pass, in the order of CleanRL's ``ppo.py``::

        pg     = clipped surrogate per action token (or, with ``targets``, the cross-entropy
                 to the target distributions: policy_update="target")
        v      = value loss (clipped around old_values with clip_range_vf) / value_scale**2
        ent    = -mean(entropy)
        loss   = pg + ent_coef * ent + vf_coef * v
                 [+ probability floor] [+ kl_coef * KL(policy || reference)]

    ``old_log_probs`` are padded to the evaluation's token width; ``value_scale`` is the value
    head's std (1 without normalisation), so the critic's loss is in the head's own units.
    """
    mask = ev.mask.float()
    surrogate = clipped_surrogate(
        ev.token_log_probs, old_log_probs, advantages, mask, settings.clip_range
    )
    critic = value_loss(ev.values, returns, old_values, settings.clip_range_vf) / (value_scale**2)
    row_entropy, listed = held_entropy(ev, settings.adaptive_entropy)
    entropy = entropy_bonus(row_entropy)
    policy_loss = surrogate.loss
    if targets is not None and ev.choice_log_probs is not None:
        policy_loss = target_cross_entropy(ev.choice_log_probs, targets)
    loss = policy_loss + settings.ent_coef * entropy + settings.vf_coef * critic
    floor = kl_ref = None
    if settings.min_action_prob > 0:
        loss = loss + (floor := floor_loss(ev, settings.min_action_prob))
    if ref_log_probs is not None:
        kl_ref = k3_kl(ev.token_log_probs, ref_log_probs, mask)
        loss = loss + settings.kl_coef * kl_ref
    return LossTerms(loss, policy_loss, critic, entropy, surrogate, listed, floor, kl_ref)
