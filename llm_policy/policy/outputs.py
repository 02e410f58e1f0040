"""What the policy's calls return: a rollout step, an update's re-evaluation, a work count."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from gym_llm.policy.top_layers import TurnStates


@dataclass
class PolicyStep:
    """What one batched policy call produced, per env."""

    #: The reply sent to each env: a :class:`gym_llm.replies.Reply` (text carrying its token ids).
    replies: list[str]
    #: Choice mode: ``[index]``; generate mode: the sampled token ids (EOS included if sampled).
    actions: list[np.ndarray]
    #: Log-prob of each action token as sampled (choice mode: one value, the action's log-prob).
    token_log_probs: list[np.ndarray]
    #: Critic values, shape ``(n,)``.
    values: torch.Tensor
    #: Per env, the first trainable layer's inputs the update reuses (``None``: it recomputes).
    states: list[TurnStates] | None = None
    #: Choice mode: each env's whole action distribution ``(n, K)`` (for diagnostics).
    action_probs: np.ndarray | None = None
    #: Generate mode with ``reply_constraint="action"``: ``(n,)`` the probability the unmasked
    #: policy gave the tokens that can start a valid action (how ready the model is unaided).
    valid_mass: np.ndarray | None = None


@dataclass
class UpdateWork:
    """What the update's passes computed (only passes with gradients), for FLOP counts.

    ``token_layers`` are real token positions times the decoder layers they went through
    (padding excluded; the shared prefix once per pass; one row per distinct observation in
    choice mode when the update starts from stored states), ``head_rows`` the positions the LM
    head scored, ``tokens`` the positions that reached a trainable layer (weight gradients).
    """

    token_layers: int = 0
    head_rows: int = 0
    tokens: int = 0


@dataclass
class Evaluation:
    """Differentiable re-evaluation of stored actions, for the PPO loss."""

    #: ``(n, T)`` log-prob of each action token (padded with 0 where ``mask`` is False).
    token_log_probs: torch.Tensor
    #: ``(n, T)`` which entries are real action tokens.
    mask: torch.Tensor
    #: ``(n,)`` entropy of the action distribution (generate: mean per-token entropy).
    entropy: torch.Tensor
    #: ``(n,)`` critic values.
    values: torch.Tensor
    #: Choice mode: ``(n, K)`` log-probs of every listed action (``None`` in generate mode).
    choice_log_probs: torch.Tensor | None = None
    #: Generate mode with the action head: ``(n, K)`` log-probs of every listed action at each
    #: reply's decision token (:func:`~gym_llm.policy.action_words.decision_log_probs`).
    decision_log_probs: torch.Tensor | None = None
    #: ``(n,)`` which replies name an action (have a decision token).
    decision_found: torch.Tensor | None = None
    #: ``decision_log_probs`` with gradients to the action head's scores only.
    decision_head_log_probs: torch.Tensor | None = None
