"""Constrained replies: generate mode decoding only the tokens that continue a listed action.

A reply is sampled under a mask of the tokens that can continue one of the actions' spellings
(a trie over their token ids), so every reply is a valid action and no budget goes into learning
the format. The mask is part of the policy: the rollout samples from the masked distribution and
the update recomputes log-probs under the very same mask, so PPO's ratio is exact (unlike
sampling under a grammar and updating over the whole vocabulary, whose ratio is off by the valid
mass). A masked token gets :data:`MASKED_LOGIT`, whose probability is exactly 0 in float32, so
entropies stay finite.

A reply ends when it spells a whole action no other action continues (no stop token is sampled);
where one action's spelling is a prefix of another's, the stop token is one of the choices.

Calibrated (``choice_calibration``, on by default for a fixed list), every choice at every node of
the trie gets a constant logit, minus its masked log-prob after the content-free observation
(as choice mode subtracts each action's content-free score): an action whose first token is a
rare fragment (``banned`` is ``b`` + ``anned`` in SmolLM2's vocabulary) starts at even odds
instead of in a corner PPO cannot leave.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import torch

from gym_llm.grammar import PatternAutomaton, token_texts
from gym_llm.policy.state_actions import MASKED_LOGIT
from gym_llm.spaces import actions_of


class ReplyAutomaton(Protocol):
    """What decoding under a constraint asks of it: the tokens allowed after a prefix, whether
    a reply is done, and calibration constants per prefix (:class:`ActionTrie`, or a pattern's
    :class:`~gym_llm.grammar.PatternAutomaton`)."""

    bias: dict[tuple[int, ...], dict[int, float]]

    def allowed(self, prefix: Sequence[int]) -> set[int]: ...

    def finished(self, prefix: Sequence[int]) -> bool: ...


class ActionTrie:
    """The token sequences of a list of replies, as a trie: which tokens may come next."""

    def __init__(self, spellings: Sequence[Sequence[int]], stop_id: int) -> None:
        if not spellings or any(len(s) == 0 for s in spellings):
            raise ValueError("Every action needs a spelling of at least one token.")
        self.stop_id = stop_id
        self.next: dict[tuple[int, ...], set[int]] = {}
        self.complete = {tuple(s) for s in spellings}
        for spelling in self.complete:
            for i, token in enumerate(spelling):
                self.next.setdefault(spelling[:i], set()).add(token)
        for spelling in self.complete:  # a whole action that others continue: stop may end it
            if spelling in self.next:
                self.next[spelling].add(stop_id)
        #: Calibration: a constant added to each choice's logit at each node (none: empty).
        self.bias: dict[tuple[int, ...], dict[int, float]] = {}

    def replies(self) -> list[tuple[int, ...]]:
        """Every whole reply the trie allows, as sampled: an action's spelling, closed by the
        stop token where another action continues it."""
        return sorted((*s, self.stop_id) if s in self.next else s for s in self.complete)

    def set_bias(
        self, replies: Sequence[Sequence[int]], log_probs: Sequence[Sequence[float]]
    ) -> None:
        """Calibrate: each choice's constant is minus its masked log-prob in ``replies`` (all of
        :meth:`replies`, scored after a content-free observation)."""
        self.bias = {}
        for reply, lps in zip(replies, log_probs, strict=True):
            for t, token in enumerate(reply):
                self.bias.setdefault(tuple(reply[:t]), {})[int(token)] = -float(lps[t])

    def allowed(self, prefix: Sequence[int]) -> set[int]:
        """The tokens that may follow ``prefix`` (the stop token alone once a reply is done or
        off the trie, which a masked rollout never is)."""
        return self.next.get(tuple(prefix), {self.stop_id})

    def finished(self, prefix: Sequence[int]) -> bool:
        """Whether ``prefix`` spells a whole action that no other action continues."""
        key = tuple(prefix)
        return (key in self.complete and key not in self.next) or (
            bool(key) and key[-1] == self.stop_id
        )


def spell(tokenizer: Any, actions: Sequence[str]) -> list[list[int]]:
    """Each action's token ids as a reply writes it (no special tokens)."""
    return [list(tokenizer(a, add_special_tokens=False)["input_ids"]) for a in actions]


class ReplyConstraint:
    """The tries of a policy's replies: one for a fixed list of actions, or one per distinct
    list where each observation brings its own (:class:`gym_llm.spaces.TextWithActions`); or,
    given a ``pattern``, the pattern's automaton (:mod:`gym_llm.grammar`) for every reply."""

    def __init__(
        self,
        tokenizer: Any,
        stop_id: int,
        actions: tuple[str, ...],
        per_state: bool,
        pattern: str | None = None,
        budget: int | None = None,
    ) -> None:
        #: Replies that match a pattern instead of a list (``None``: a list), within ``budget``
        #: tokens.
        self.pattern = (
            PatternAutomaton(pattern, token_texts(tokenizer), stop_id, budget) if pattern else None
        )
        if not actions and not per_state and self.pattern is None:
            raise ValueError(
                "reply_constraint='action' needs an env that lists its actions (a Discrete "
                "space through ActionParserWrapper, or per-state lists); this one takes free "
                "text: use reply_constraint='off'."
            )
        self.tokenizer = tokenizer
        self.stop_id = stop_id
        self.actions = actions
        self.per_state = per_state
        self._tries: dict[tuple[str, ...], ActionTrie] = {}

    def trie(self, actions: tuple[str, ...]) -> ActionTrie:
        if actions not in self._tries:
            self._tries[actions] = ActionTrie(spell(self.tokenizer, actions), self.stop_id)
        return self._tries[actions]

    @property
    def calibrated(self) -> bool:
        """Whether any of its tries carries calibration constants."""
        return any(trie.bias for trie in self._tries.values())

    def tries(self, observations: Sequence[Any]) -> list[ReplyAutomaton]:
        """Each observation's trie (or the pattern's automaton, which answers the same)."""
        if self.pattern is not None:
            return [self.pattern] * len(observations)
        if not self.per_state:
            return [self.trie(self.actions)] * len(observations)
        tries: list[ReplyAutomaton] = []
        for observation in observations:
            actions = actions_of(observation) or self.actions
            if not actions:
                raise ValueError(
                    f"An observation brought no list of actions to constrain the reply to: "
                    f"{str(observation)[:80]!r}."
                )
            tries.append(self.trie(tuple(actions)))
        return tries


def allowed_mask(
    tries: Sequence[ReplyAutomaton], prefixes: Sequence[Sequence[int]], vocab: int, device: Any
) -> torch.Tensor:
    """``(n, vocab)``: which next tokens each row may take after its prefix."""
    mask = torch.zeros((len(tries), vocab), dtype=torch.bool)
    for row, (trie, prefix) in enumerate(zip(tries, prefixes, strict=True)):
        mask[row, list(trie.allowed(prefix))] = True  # order is irrelevant: no sort per step
    return mask.to(device)


def reply_masks(
    tries: Sequence[ReplyAutomaton],
    replies: Sequence[np.ndarray],
    width: int,
    vocab: int,
    device: Any,
) -> torch.Tensor:
    """``(n, width, vocab)``: the mask each stored reply was sampled under, position by position
    (positions past a reply's end allow everything: they are not scored)."""
    mask = torch.ones((len(replies), width, vocab), dtype=torch.bool)
    for row, (trie, reply) in enumerate(zip(tries, replies, strict=True)):
        ids = [int(t) for t in reply]
        for t in range(min(width, len(ids))):
            mask[row, t] = False
            mask[row, t, list(trie.allowed(ids[:t]))] = True
    return mask.to(device)


def node_bias(
    tries: Sequence[ReplyAutomaton], prefixes: Sequence[Sequence[int]], vocab: int, device: Any
) -> torch.Tensor | None:
    """``(n, vocab)``: each row's calibration constants after its prefix (``None``: none)."""
    if not any(trie.bias for trie in tries):
        return None
    bias = torch.zeros((len(tries), vocab))
    for row, (trie, prefix) in enumerate(zip(tries, prefixes, strict=True)):
        for token, value in trie.bias.get(tuple(prefix), {}).items():
            bias[row, token] = value
    return bias.to(device)


def reply_bias(
    tries: Sequence[ReplyAutomaton],
    replies: Sequence[np.ndarray],
    width: int,
    vocab: int,
    device: Any,
) -> torch.Tensor | None:
    """``(n, width, vocab)``: the calibration constants each stored reply was sampled under."""
    if not any(trie.bias for trie in tries):
        return None
    bias = torch.zeros((len(replies), width, vocab))
    for row, (trie, reply) in enumerate(zip(tries, replies, strict=True)):
        ids = [int(t) for t in reply]
        for t in range(min(width, len(ids))):
            for token, value in trie.bias.get(tuple(ids[:t]), {}).items():
                bias[row, t, token] = value
    return bias.to(device)


def masked(logits: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """``logits`` with every token outside ``allowed`` at :data:`MASKED_LOGIT`."""
    return logits.masked_fill(~allowed, MASKED_LOGIT)


def valid_mass(log_probs: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """``(n,)``: the probability the unconstrained distribution (``log_probs``, ``(n, V)``) puts
    on the allowed tokens: how ready the model is to write a valid action unaided."""
    return torch.logsumexp(log_probs.masked_fill(~allowed, float("-inf")), -1).exp()
