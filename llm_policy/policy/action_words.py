"""The action head in generate mode: its per-action scores added to the logits of the tokens
that spell each listed action, at every reply position.

Measured on the task family's threshold task (``benchmarks/RESULTS.md``, ``family_sweep
--replies``): a generate-mode policy moves every state's reply the same way (the sampled share of
the majority word doubled in the states where it is wrong too) and its greedy reply ends the same
in every state. That is the shared gradient that choice mode's action head
(:mod:`gym_llm.policy.action_head`) removed there. In generate mode the word that decides the
action is one token of a free sentence, so the head's score for action ``k`` in state ``s`` is
added to the logit of each token that starts a spelling of ``k`` (``low``, `` low``, ``Low``, ...)
at every position of the reply. The head starts at zero, so the policy starts as the LM; the
scores are part of the distribution that samples, so the stored log-probs stay exact.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

#: How a reply may spell an action: as given, after a space, capitalised, upper case.
SPELLINGS: tuple[Callable[[str], str], ...] = (
    lambda a: a,
    lambda a: " " + a,
    lambda a: a[:1].upper() + a[1:],
    lambda a: " " + a[:1].upper() + a[1:],
    str.upper,
    lambda a: " " + a.upper(),
)


def distinguishing_tokens(spelled: Sequence[Sequence[int]]) -> list[int | None]:
    """For each action's token ids (one spelling), its first token that no other action has at
    the same position (``None`` if it has none): the token where a reply commits to it.

    >>> distinguishing_tokens([[7, 1], [7, 2], [9]])  # "move left", "move right", "stay"
    [1, 2, 9]
    >>> distinguishing_tokens([[7], [7, 2]])  # the first is a prefix of the second
    [None, 2]
    """
    out: list[int | None] = []
    for k, ids in enumerate(spelled):
        others = [o for j, o in enumerate(spelled) if j != k]
        found = None
        for i, token in enumerate(ids):
            if all(i >= len(o) or o[i] != token for o in others):
                found = token
                break
        out.append(found)
    return out


@dataclass(frozen=True)
class ActionWords:
    """Token ids that spell the listed actions, each with the action it stands for, and how much
    of the LM's own preference among the actions the policy keeps (``prior_scale``)."""

    ids: torch.Tensor  # (m,) token ids
    owners: torch.Tensor  # (m,) the action index of each
    #: 1: the LM's preference among the actions as it is; 0: none of it (see :meth:`add`).
    prior_scale: float = 1.0

    def add(self, logits: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """``logits`` ``(n, V)`` or ``(n, T, V)`` plus ``scores`` ``(n, K)``, centred over the
        actions, at each action's tokens (at every position), with gradients to both.

        Centred, because the head is there to say *which* action, not *whether* to name one:
        uncentred, the scores' common part moved every action word down together, and the
        greedy reply stopped naming any action (measured on the task family's threshold task,
        ``benchmarks/RESULTS.md``). Choice mode's softmax ignores that part anyway.

        With ``prior_scale`` below 1, each action's tokens also move by ``-(1 - prior_scale)``
        times its centred log-mass at that position (the logsumexp of its tokens' logits): at
        0, every position gives the actions equal mass before the head's scores, so the LM
        still decides *where* a reply names an action and the head alone *which*. A state
        where the model is sure of the wrong word then starts at even odds, not in the
        softmax corner."""
        extra = _centred(scores)[:, self.owners].to(logits.dtype)
        if logits.ndim == 3:
            extra = extra.unsqueeze(1).expand(-1, logits.shape[1], -1)
        if self.prior_scale != 1.0:
            shift = self.prior_shift(logits[..., self.ids], scores.shape[-1])
            extra = extra + shift[..., self.owners].to(logits.dtype)
        return logits.index_add(-1, self.ids, extra)

    def prior_shift(self, at: torch.Tensor, n_actions: int) -> torch.Tensor:
        """``(..., K)``: what :meth:`add` moves each action's tokens by, from the LM's logits
        ``at`` the action words ``(..., m)`` (zero at ``prior_scale`` 1)."""
        mass = _action_mass(at.float(), self.owners, n_actions)
        return -(1.0 - self.prior_scale) * (mass - mass.mean(-1, keepdim=True))


def action_words(
    tokenizer: Any,
    actions: Sequence[str],
    device: torch.device | str | None = None,
    prior_scale: float = 1.0,
) -> ActionWords:
    """The tokens that start each action's distinguishing word in every spelling of
    :data:`SPELLINGS`. A token two actions would share is left out, and so is a one-character
    token where the action has longer ones (``S`` of ``Sell`` starts too many other words; a
    character-level tokenizer has only those).

    Raises:
        ValueError: an action has no token of its own (the head could not raise it alone).
    """
    found: dict[int, set[int]] = {}
    for spell in SPELLINGS:
        spelled = [tokenizer.encode(spell(a), add_special_tokens=False) for a in actions]
        for k, token in enumerate(distinguishing_tokens(spelled)):
            if token is not None:
                found.setdefault(token, set()).add(k)
    own = {t: next(iter(k)) for t, k in found.items() if len(k) == 1}
    wide = {t: len(str(tokenizer.decode([t])).strip()) > 1 for t in own}
    longer = {k for t, k in own.items() if wide[t]}
    own = {t: k for t, k in own.items() if wide[t] or k not in longer}
    missing = [a for k, a in enumerate(actions) if k not in own.values()]
    if missing:
        raise ValueError(
            f"action_head in generate mode raises each action's own word tokens, and {missing} "
            "share all of theirs with other actions under this tokenizer. Reword the actions "
            "(e.g. TextActions with distinct first words) or leave action_head off."
        )
    ids = sorted(own)
    return ActionWords(
        torch.tensor(ids, dtype=torch.long, device=device),
        torch.tensor([own[t] for t in ids], dtype=torch.long, device=device),
        float(prior_scale),
    )


def has_own_words(tokenizer: Any, actions: Sequence[str]) -> bool:
    """Whether every action has a word token of its own (what :func:`action_words` needs)."""
    try:
        action_words(tokenizer, actions)
    except ValueError:
        return False
    return True


def decision_log_probs(
    logits: torch.Tensor,
    reply: torch.Tensor,
    valid: torch.Tensor,
    words: ActionWords,
    n_actions: int,
    temperature: float = 1.0,
    scores: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``((n, K) log-probs, (n,) found)``: each reply's choice among the listed actions at its
    *decision token*, the first of its tokens that spells an action, with gradients.

    A reply is a sentence, and its per-token entropy mostly measures how freely it words it;
    what decides the action is the one token that names it. There the distribution restricted
    to the action words (each action's share the sum over its tokens, renormalised) is the
    policy's per-state choice, the quantity choice mode's entropy control holds. A reply that
    names no action has no decision (``found`` False; its row is uniform). ``logits`` are the
    LM's; ``scores`` ``(n, K)``: the action head's, added as :meth:`ActionWords.add` adds them
    (pass the LM's logits detached to get a decision whose gradient reaches the head alone).

    >>> words = ActionWords(torch.tensor([5, 6]), torch.tensor([0, 1]))
    >>> logits = torch.zeros(2, 3, 8)
    >>> logits[0, 1, 6] = 2.0  # position 1: the second action is likelier
    >>> reply = torch.tensor([[1, 6, 2], [1, 2, 3]])  # the second reply names no action
    >>> lp, found = decision_log_probs(logits, reply, torch.ones(2, 3, dtype=torch.bool), words, 2)
    >>> [round(p, 3) for p in lp[0].exp().tolist()], found.tolist()
    ([0.119, 0.881], [True, False])
    """
    at, found = _at_decision(logits, reply, valid, words)
    offset = _offset(at, words, n_actions, scores)
    return _per_action(at, found, words, n_actions, temperature, offset), found


def decisions(
    logits: torch.Tensor,
    reply: torch.Tensor,
    valid: torch.Tensor,
    words: ActionWords,
    n_actions: int,
    temperature: float,
    scores: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(decision, decision with gradients to the head alone, found)`` from the LM's
    ``logits`` and the head's ``scores``: :func:`decision_log_probs` both ways, with the
    decision token found and gathered once."""
    at, found = _at_decision(logits, reply, valid, words)
    head, shift = _centred(scores).float(), _shift(at, words, n_actions)
    offset, fixed = (head, head) if shift is None else (head + shift, head + shift.detach())
    whole = _per_action(at, found, words, n_actions, temperature, offset)
    return whole, _per_action(at.detach(), found, words, n_actions, temperature, fixed), found


def _at_decision(
    logits: torch.Tensor, reply: torch.Tensor, valid: torch.Tensor, words: ActionWords
) -> tuple[torch.Tensor, torch.Tensor]:
    """``((n, m) logits of the action words at each reply's decision token, (n,) found)``."""
    steps = reply.shape[1]
    named = torch.isin(reply, words.ids) & valid.bool()
    found = named.any(-1)
    position = torch.where(named, torch.arange(steps, device=reply.device), steps).amin(-1)
    rows = torch.arange(reply.shape[0], device=reply.device)
    return logits[rows, position.clamp(max=steps - 1)][:, words.ids].float(), found


def _offset(
    at: torch.Tensor, words: ActionWords, n_actions: int, scores: torch.Tensor | None
) -> torch.Tensor | None:
    """``(n, K)``: what :meth:`ActionWords.add` adds to each action's tokens at the decision
    (the head's centred scores and the prior's shift), or ``None`` when it adds nothing."""
    shift = _shift(at, words, n_actions)
    if scores is None:
        return shift
    head = _centred(scores).float()
    return head if shift is None else head + shift


def _shift(at: torch.Tensor, words: ActionWords, n_actions: int) -> torch.Tensor | None:
    """:meth:`ActionWords.prior_shift`, or ``None`` at ``prior_scale`` 1 (nothing to add)."""
    return words.prior_shift(at, n_actions) if words.prior_scale != 1.0 else None


def _centred(scores: torch.Tensor) -> torch.Tensor:
    """The head's scores less their mean over the actions (see :meth:`ActionWords.add`)."""
    return scores - scores.mean(-1, keepdim=True)


def _action_mass(at: torch.Tensor, owners: torch.Tensor, n_actions: int) -> torch.Tensor:
    """``(..., K)``: each action's tokens' logits ``at`` ``(..., m)`` summed as probabilities
    (logsumexp); ``-inf`` for an action with no token."""
    member = owners == torch.arange(n_actions, device=owners.device).unsqueeze(-1)  # (K, m)
    return torch.logsumexp(at.unsqueeze(-2).masked_fill(~member, float("-inf")), -1)


def _per_action(
    at: torch.Tensor,
    found: torch.Tensor,
    words: ActionWords,
    n_actions: int,
    temperature: float,
    offset: torch.Tensor | None,
) -> torch.Tensor:
    """Log-probs over the actions: each one's tokens summed (logsumexp) at ``temperature``
    plus its ``offset``, renormalised; a row with no decision is uniform."""
    per_action = _action_mass(at / temperature, words.owners, n_actions)
    if offset is not None:
        per_action = per_action + offset / temperature
    per_action = torch.where(found.unsqueeze(-1), per_action, torch.zeros_like(per_action))
    return torch.log_softmax(per_action, -1)
