"""The floor on how moves are sampled (``PPO(floor_mode="behaviour")``): the rollout plays
``(1 - K·f)·pi + f`` over the K listed actions, and the policy itself is left free to converge.

With ``floor_mode="barrier"`` the floor is a log-barrier in the loss that holds every action of
the *policy* at ``f`` in every state; its gradient in every settled state can keep the policy
from telling apart two states whose texts differ in one word. Here the exploration is the
learner's, as DQN's ε-greedy is: the action values still see every move (what the floor buys on
noisy tasks), the target update tilts the *policy* by their advantages, and nothing in the loss
pulls the policy toward the floor. (A target built on the floored distribution would: in a
settled state it is that distribution, so the fit would hold every action near the floor.)

The functions are pure (NumPy / torch, no model) and tested on their own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from gym_llm.policy.outputs import PolicyStep

#: Where ``min_action_prob`` acts: a barrier in the loss on the policy, or a mix in the rollout
#: (``"auto"``: the mix where it applies, else the barrier; :func:`resolve_floor_mode`).
FLOOR_MODES = ("auto", "barrier", "behaviour")


def check_floor_mode(mode: str) -> str:
    """``floor_mode`` as given, or a ``ValueError`` naming the choices."""
    if mode not in FLOOR_MODES:
        raise ValueError(
            f"floor_mode must be 'auto' (the default), 'barrier' (a log-barrier in the loss) or "
            f"'behaviour' (the rollout samples from the policy mixed with the floor), got {mode!r}."
        )
    return mode


def resolve_floor_mode(mode: str, update: str, policy: Any) -> str:
    """``floor_mode`` made concrete once the update is: ``"auto"`` is ``"behaviour"`` where it
    applies (the target update over one fixed list of scored actions) and ``"barrier"``
    elsewhere; a named mode stays as given (and :func:`check_behaviour_floor` says why one
    cannot apply).

    >>> from types import SimpleNamespace
    >>> choice = SimpleNamespace(scores_listed_actions=True, per_state=False)
    >>> resolve_floor_mode("auto", "target", choice), resolve_floor_mode("auto", "clip", choice)
    ('behaviour', 'barrier')
    """
    if mode != "auto":
        return mode
    return "behaviour" if update == "target" and _scores_one_list(policy) else "barrier"


def _scores_one_list(policy: Any) -> bool:
    """The policy scores one fixed list of actions, the only place the floor can be sampled."""
    return bool(policy.scores_listed_actions and not getattr(policy, "per_state", False))


def check_behaviour_floor(mode: str, update: str, policy: Any) -> None:
    """``floor_mode="behaviour"`` samples among one fixed list of scored actions, and only the
    target update can learn from moves the policy did not draw (the clipped surrogate's ratio
    would be the policy's over the behaviour's)."""
    if mode != "behaviour":
        return
    if not _scores_one_list(policy):
        raise ValueError(
            'floor_mode="behaviour" samples among one fixed list of scored actions: use choice '
            'mode with an env whose actions are listed once, or floor_mode="barrier".'
        )
    if update != "target":
        raise ValueError(
            f'floor_mode="behaviour" needs policy_update="target" (got {update!r}): the clipped '
            'surrogate cannot learn from moves the policy did not draw. Use floor_mode="barrier" '
            "with it."
        )


def check_floor_balance(balance: float, mode: str, estimator: str) -> None:
    """``floor_balance`` shares the rollout's floor by the plays the action values' replay
    holds, so it needs both (``mode`` and ``estimator`` as resolved)."""
    if balance > 0 and not (mode == "behaviour" and estimator == "q"):
        raise ValueError(
            f"floor_balance={balance:g} shares the rollout's floor by the plays the action "
            'values hold: it needs floor_mode="behaviour" with advantage_estimator="q" (choice '
            "mode's defaults), or floor_balance=0."
        )


def floored(probs: np.ndarray, floor: float, weights: np.ndarray | None = None) -> np.ndarray:
    """``probs`` (``(..., K)``) mixed with the uniform distribution so that every action keeps
    at least ``floor``: ``(1 - K·floor)·probs + floor``, the order of the actions unchanged.
    With ``weights`` (rows summing to 1, :func:`rare_first`) the floor's ``K·floor`` of mass is
    shared by them instead of evenly.

    >>> floored(np.array([[1.0, 0.0, 0.0, 0.0]]), 0.05).round(3).tolist()
    [[0.85, 0.05, 0.05, 0.05]]
    >>> floored(np.array([[1.0, 0.0]]), 0.05, np.array([[0.25, 0.75]])).round(3).tolist()
    [[0.925, 0.075]]
    """
    k = probs.shape[-1]
    if not 0 <= floor * k < 1:
        raise ValueError(
            f"a floor of {floor} on each of {k} actions leaves no mass for the policy: give "
            f"min_action_prob less than 1/{k}."
        )
    if weights is None:
        return ((1 - k * floor) * probs + floor).astype(probs.dtype)  # type: ignore[no-any-return]
    return ((1 - k * floor) * probs + k * floor * weights).astype(probs.dtype)  # type: ignore[no-any-return]


def rare_first(plays: np.ndarray, balance: float) -> np.ndarray:
    """How the floor's mass is shared among each state's moves with ``floor_balance`` β:
    ∝ ``(n + 1)^-β``, ``n`` the times each was played (``(..., K)``). 0 shares it evenly; the
    larger β, the more of it goes to the moves a state has played least, so a move the policy
    has left gets outcomes to correct its value from.

    >>> rare_first(np.array([[99, 9], [0, 0]]), 1.0).round(3).tolist()
    [[0.091, 0.909], [0.5, 0.5]]
    """
    if not balance >= 0:
        raise ValueError(f"floor_balance must be >= 0 (0: the floor shared evenly), got {balance}.")
    weights = (plays.astype(np.float64) + 1.0) ** -balance
    return weights / weights.sum(-1, keepdims=True)  # type: ignore[no-any-return]


def explore(
    step: PolicyStep, floor: float, replies: Sequence[str], weights: np.ndarray | None = None
) -> PolicyStep:
    """``step`` (a choice-mode rollout call over one list of ``replies``) with each env's action
    drawn from :func:`floored` instead of the policy: with probability ``K·floor`` a uniform
    action (one drawn by ``weights``, ``(n, K)``, where given) replaces the policy's draw,
    which is the mixture exactly and reuses that draw.

    ``action_probs`` become the behaviour's (what the action values' replay records as sampled
    with); ``token_log_probs`` stay the *policy's* log-prob of the action played, so the
    update's ratio diagnostics compare the policy with itself (exact where the policy's own
    draw stands, from the float32 probabilities where a uniform one replaced it). Draws use
    torch's global generator, which a checkpoint saves.
    """
    if step.action_probs is None:
        raise ValueError("floor_mode='behaviour' needs a choice among listed actions.")
    probs = step.action_probs
    n, k = probs.shape
    if k != len(replies):
        raise ValueError(f"the step scores {k} actions but {len(replies)} replies were given.")
    swap = torch.rand(n) < k * floor
    if weights is None:
        spread = torch.randint(k, (n,))
    else:
        spread = torch.multinomial(torch.as_tensor(weights, dtype=torch.float64), 1).view(n)
    chosen = [
        int(spread[i]) if swap[i] else int(action[0]) for i, action in enumerate(step.actions)
    ]
    tiny = float(np.finfo(np.float32).tiny)
    return replace(
        step,
        replies=[replies[a] for a in chosen],
        actions=[np.array([a], dtype=np.int64) for a in chosen],
        token_log_probs=[
            np.array([math.log(max(float(probs[i, a]), tiny))], dtype=np.float32)
            if swap[i]
            else step.token_log_probs[i]
            for i, a in enumerate(chosen)
        ],
        action_probs=floored(probs, floor, weights),
    )
