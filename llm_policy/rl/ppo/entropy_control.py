"""``ent_coef="auto"``: an entropy coefficient that holds the policy's entropy at a target.

A fixed entropy bonus is either too weak to stop a policy from committing early (a linear action
head made states near-certain within four updates on the task family, some of them wrong, and
the policy gradient cannot move a near-certain wrong action: its gradient is ``p (1 - p) A``) or
too strong once the task is learned. SAC-discrete's temperature rule (SB3's ``ent_coef="auto"``)
keeps the mean entropy near a target instead: the coefficient grows while the entropy is below
it and shrinks while it is above. Here the coefficient is multiplied by
``exp(rate * (target - H) / log K)`` after every optimizer step (a few dozen steps per thousand
env steps, far fewer than SAC's one per env step, hence a direct multiplicative rule rather than
a slow Adam step on ``log alpha``), within ``[MIN_COEF, MAX_COEF]``.

In generate mode the entropy it holds is that of each reply's *decision token* among the listed
actions (:func:`held_entropy`), not the mean per-token entropy of the sentence: a generate-mode
policy became certain in every state within 256 env steps on the task family, wrong in the states
where the model's knowledge contradicts the rule (``benchmarks/RESULTS.md``), and the per-token
entropy would mostly reward looser wording.

The other lever against a peaked prior lives here too: ``min_action_prob``, a floor on each
listed action's probability (:func:`floor_loss`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from gym_llm.policy.outputs import Evaluation
from gym_llm.rl.common.diagnostics import entropy
from gym_llm.rl.common.distributed import global_sums
from gym_llm.rl.ppo.loss_terms import probability_floor

#: Where ``"auto"`` starts, and the bounds of the coefficient.
INITIAL_COEF, MIN_COEF, MAX_COEF = 0.01, 1e-4, 1.0
#: The default target, as a share of ``log K`` (K listed actions): p(rarest) ~ 0.05 for K = 2.
TARGET_SHARE = 0.3
#: How fast the coefficient follows: ``exp(RATE * gap / log K)`` per optimizer step.
RATE = 1.0
#: Which entropy ``"auto"`` holds at the target (``PPO(target_entropy_of=...)``).
ENTROPY_OF = ("state", "marginal")


def parse_ent_coef(value: float | str) -> tuple[float, bool]:
    """``(initial coefficient, adaptive?)`` from ``ent_coef``: a number, ``"auto"`` or
    ``"auto_0.05"`` (adaptive, starting at 0.05), as SB3's SAC reads it.

    >>> parse_ent_coef(0.02), parse_ent_coef("auto"), parse_ent_coef("auto_0.1")
    ((0.02, False), (0.01, True), (0.1, True))
    """
    if isinstance(value, str):
        name, _, start = value.partition("_")
        if name != "auto":
            raise ValueError(f"ent_coef must be a number, 'auto' or 'auto_<start>', got {value!r}.")
        try:
            initial = float(start) if start else INITIAL_COEF
        except ValueError:
            raise ValueError(
                f"ent_coef {value!r}: the start after 'auto_' must be a number."
            ) from None
        if not MIN_COEF <= initial <= MAX_COEF:
            raise ValueError(f"ent_coef {value!r}: start in [{MIN_COEF}, {MAX_COEF}].")
        return initial, True
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"ent_coef must be >= 0, 'auto' or 'auto_<start>', got {value!r}.")
    return float(value), False


def default_target(n_actions: int) -> float:
    """:data:`TARGET_SHARE` of the largest entropy, ``log K`` nats."""
    if n_actions < 2:
        raise ValueError(f"an entropy target needs at least 2 actions, got {n_actions}.")
    return TARGET_SHARE * math.log(n_actions)


def next_ent_coef(coef: float, entropy: float, target: float | None, n_actions: int) -> float:
    """The coefficient after one optimizer step whose batch had mean entropy ``entropy``
    (``target`` ``None``: :func:`default_target`).

    >>> round(next_ent_coef(0.01, entropy=0.1, target=0.2, n_actions=2), 5)  # below: grows
    0.01155
    >>> next_ent_coef(0.01, entropy=0.3, target=0.2, n_actions=2) < 0.01  # above: shrinks
    True
    """
    if not math.isfinite(entropy):  # nothing measured (no reply named an action): unchanged
        return coef
    target = default_target(n_actions) if target is None else target
    scale = math.log(max(n_actions, 2))
    updated = coef * math.exp(RATE * (target - entropy) / scale)
    return min(max(updated, MIN_COEF), MAX_COEF)


def check_entropy_of(value: str, adaptive: bool) -> str:
    """``target_entropy_of``, checked: ``"state"`` or ``"marginal"``, the latter with ``"auto"``."""
    if value not in ENTROPY_OF:
        raise ValueError(f"target_entropy_of must be 'state' or 'marginal', got {value!r}.")
    if value == "marginal" and not adaptive:
        raise ValueError(
            "target_entropy_of='marginal' chooses what ent_coef='auto' holds at the target; "
            "set ent_coef='auto' as well, or leave target_entropy_of='state'."
        )
    return value


def check_listed_actions(policy: Any, target: bool, auto: bool, floor: float) -> None:
    """The settings that work over one fixed list of scored actions: ``policy_update="target"``
    (choice mode), and ``ent_coef="auto"`` and ``min_action_prob`` (choice mode, or generate
    mode with the action head, whose ``action_words`` name each action's tokens); ``floor``:
    ``min_action_prob``, under ``1/K``."""
    if target and not policy.scores_listed_actions:
        raise ValueError(
            'policy_update="target" needs choice mode (a target over the listed actions); '
            'in generate mode use policy_update="clip".'
        )
    if getattr(policy, "per_state", False) and (target or auto or floor > 0):
        raise ValueError(
            'policy_update="target", ent_coef="auto" and min_action_prob work over one fixed '
            "list of actions; this env brings its own list in every state: use the defaults."
        )
    check_choice_among_listed(auto, floor > 0, policy.chooses_among_listed)
    if floor and floor * len(policy.actions_list) >= 1:
        raise ValueError(
            f"min_action_prob {floor} would hold all {len(policy.actions_list)} actions at the "
            f"floor; give it less than 1/{len(policy.actions_list)}, e.g. 0.05."
        )


def check_choice_among_listed(auto: bool, floor: bool, among_listed: bool) -> None:
    """``ent_coef="auto"`` and ``min_action_prob`` need a choice among listed actions
    (``among_listed``: choice mode, or generate mode with the action head)."""
    if (auto or floor) and not among_listed:
        raise ValueError(
            'ent_coef="auto" and min_action_prob act on the choice among listed actions: in '
            "generate mode set policy_kwargs action_head=True (an env with listed actions), or "
            "give ent_coef a number, e.g. 0.01 (the replies' per-token entropy)."
        )


def check_floor(value: float | str) -> float:
    """``min_action_prob`` given as a number: 0 (off) or in ``(0, 1/2)``, the bound for two
    actions (at or over ``1/K`` it would hold every action at the floor;
    :func:`check_listed_actions` checks K)."""
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value < 0.5:
        raise ValueError(
            f"min_action_prob must be 'auto' or a number in [0, 0.5) (0: off), got {value!r}."
        )
    return float(value)


def action_log_probs(ev: Evaluation) -> torch.Tensor | None:
    """``(rows, K)`` log-probs of the listed actions, with gradients: each state's in choice
    mode; in generate mode with the action head, at the decision token of each reply that names
    an action; ``None`` otherwise."""
    if ev.decision_log_probs is not None and ev.decision_found is not None:
        return ev.decision_log_probs[ev.decision_found]
    return ev.choice_log_probs


def marginal_entropy(probs: Sequence[torch.Tensor]) -> float:
    """Entropy (nats) of the mean action distribution over every row of ``probs`` (``(n, K)``
    each), in every process of a data-parallel run: H(A) = H(A|S) + I(S; A). A policy that is
    certain in each state but answers differently across states keeps it high; one that plays
    the same action everywhere (the collapse that ``"auto"`` exists to undo) takes it to 0, as
    the per-state entropy does.

    >>> round(marginal_entropy([torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]])]), 4)
    0.6931
    >>> marginal_entropy([torch.tensor([[1.0, 0.0], [1.0, 0.0]])])  # the same action everywhere
    0.0
    """
    rows = torch.cat(list(probs)).float()
    *sums, count = global_sums([*rows.sum(dim=0).tolist(), len(rows)])
    if not count:  # no rows anywhere: nothing measured
        return float("nan")
    return max(0.0, float(entropy(np.asarray(sums) / count)))


def floor_loss(ev: Evaluation, floor: float) -> torch.Tensor:
    """``min_action_prob``'s term of the loss on the listed actions' log-probs
    (:func:`check_listed_actions` makes sure there are some). In generate mode its gradient
    reaches the action head alone: through every weight it took the update over and the
    replies stopped learning to name an action (``benchmarks/RESULTS.md``)."""
    if ev.decision_head_log_probs is not None and ev.decision_found is not None:
        log_probs = ev.decision_head_log_probs[ev.decision_found]
    elif ev.choice_log_probs is not None:
        log_probs = ev.choice_log_probs
    else:
        raise ValueError("min_action_prob needs a choice among listed actions.")
    return probability_floor(log_probs, floor)


def held_entropy(ev: Evaluation, adaptive: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(entropy per row, (rows, K) log-probs of the listed actions or None)``: what the
    entropy bonus raises and ``"auto"`` holds, and the distribution ``target_entropy_of=
    "marginal"`` averages. Choice mode: each state's distribution over the listed actions.
    Generate mode: the mean per-token entropy of each reply, or with ``"auto"`` (``adaptive``)
    and the action head the entropy of each reply's decision among the listed actions, over
    the replies that name one (possibly none: an empty tensor)."""
    log_probs = action_log_probs(ev)
    if adaptive and ev.decision_log_probs is not None and log_probs is not None:
        return -(log_probs.exp() * log_probs).sum(-1), log_probs
    return ev.entropy, log_probs
