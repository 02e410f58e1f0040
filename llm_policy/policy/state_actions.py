"""Choice mode over per-state action sets: each observation brings its own list of actions.

The scoring machinery scores one candidate list for a whole batch (one tensor of candidate
tokens, shared prefix and KV caches, the trunk's stored candidate states). A batch whose
observations bring different lists (:class:`gym_llm.spaces.TextWithActions`) is split into
groups that share a list; each group runs through the very same code with its own candidates,
and the results are put back in row order, each row's distribution padded with
:data:`MASKED_LOGIT` where it has fewer actions than the widest row. ``exp(MASKED_LOGIT)`` is
exactly 0 in every float type, so a row's probabilities and log-probs are those of a softmax
over its own actions alone: the log-probs stay exact (invariant 1).

The action head, the choice calibration and the centred critic are per action index, which means
nothing when the list changes from state to state: they are off here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch

from gym_llm.policy.outputs import Evaluation, PolicyStep
from gym_llm.policy.scoring import ActionScoring
from gym_llm.policy.top_layers import TurnStates
from gym_llm.replies import Reply
from gym_llm.spaces import actions_of

#: The logit of an action a state does not have: its probability is exactly 0.
MASKED_LOGIT = -1e9

#: The fixed-list ``_act`` and ``evaluate_actions`` that a group runs through.
Act = Callable[[Sequence[str], bool], PolicyStep]
Evaluate = Callable[
    [Sequence[str], Sequence[np.ndarray], Sequence[TurnStates | None] | None], Evaluation
]


def state_groups(observations: Sequence[str]) -> list[tuple[tuple[str, ...], list[int]]]:
    """Rows grouped by the action list their observation carries, in first-seen order.

    Raises when an observation carries no list, or the same text comes with two lists (the
    policy's caches are per text: the text must determine the list)."""
    groups: dict[tuple[str, ...], list[int]] = {}
    seen: dict[str, tuple[str, ...]] = {}
    for row, observation in enumerate(observations):
        actions = actions_of(observation)
        if not actions:
            raise ValueError(
                f"Choice mode over per-state actions, but observation {row} "
                f"({str(observation)[:80]!r}) carries no valid actions: the env must list them "
                "for every state it asks for an action in (ValidActionsWrapper reads "
                "info['valid_actions'])."
            )
        if seen.setdefault(str(observation), actions) != actions:
            raise ValueError(
                f"The observation {str(observation)[:80]!r} came with two different action lists "
                f"({seen[str(observation)]} and {actions}); list the actions in the text "
                "(ValidActionsWrapper does) so that the text determines them."
            )
        groups.setdefault(actions, []).append(row)
    return list(groups.items())


def _inverse(order: list[int]) -> torch.Tensor:
    inverse = torch.empty(len(order), dtype=torch.long)
    inverse[torch.tensor(order, dtype=torch.long)] = torch.arange(len(order))
    return inverse


def pad_columns(tensors: Sequence[torch.Tensor], value: float) -> torch.Tensor:
    """``(n_g, K_g)`` tensors stacked as ``(sum n_g, max K_g)``, padded with ``value``."""
    width = max(t.shape[1] for t in tensors)
    return torch.cat(
        [torch.nn.functional.pad(t, (0, width - t.shape[1]), value=value) for t in tensors]
    )


class PerStateChoices(ActionScoring):
    """Splits choice-mode calls by action list (see the module)."""

    #: Each observation brings its own actions (``TextActions(per_state=True)``).
    per_state: bool
    actions_list: tuple[str, ...]
    _in_group: bool
    _candidate_sets: dict[tuple[str, ...], tuple[tuple[torch.Tensor, torch.Tensor], list[Reply]]]

    def _splits(self) -> bool:
        return self.per_state and self.action_mode == "choice" and not self._in_group

    @contextlib.contextmanager
    def _candidates_for(self, actions: tuple[str, ...]) -> Iterator[None]:
        """Score ``actions`` as if they were the policy's fixed list."""
        saved = (self._candidates, getattr(self, "_choice_replies", []), self.actions_list)
        self._in_group = True
        self.actions_list = actions
        try:
            entry = self._candidate_sets.get(actions)
            if entry is None:
                # Normal tensors even when first met in a rollout's inference mode: the update
                # indexes with them under autograd.
                with torch.inference_mode(False):
                    candidates = self._tokenize_candidates()  # sets _choice_replies
                entry = (candidates, self._choice_replies)
                if len(self._candidate_sets) >= 4096:  # games with endless lists: bounded
                    self._candidate_sets.clear()
                self._candidate_sets[actions] = entry
            self._candidates, self._choice_replies = entry
            yield
        finally:
            self._candidates, self._choice_replies, self.actions_list = saved
            self._in_group = False

    def _act_in_groups(
        self, observations: Sequence[str], act: Act, deterministic: bool
    ) -> PolicyStep:
        """``act`` (the fixed-list ``_act``) per group, merged back in row order."""
        n = len(observations)
        replies: list[str] = [""] * n
        actions: list[np.ndarray] = [np.zeros(1, dtype=np.int64)] * n
        log_probs: list[np.ndarray] = [np.zeros(1, dtype=np.float32)] * n
        states: list[TurnStates | None] = [None] * n
        values = torch.empty(n, device=self.device)
        probs: list[np.ndarray] = [np.zeros(0)] * n
        for group_actions, rows in state_groups(observations):
            with self._candidates_for(group_actions):
                step = act([observations[r] for r in rows], deterministic)
            values[torch.tensor(rows, device=self.device)] = step.values.to(values.dtype)
            for j, row in enumerate(rows):
                replies[row], actions[row] = step.replies[j], step.actions[j]
                log_probs[row] = step.token_log_probs[j]
                states[row] = step.states[j] if step.states is not None else None
                probs[row] = step.action_probs[j] if step.action_probs is not None else probs[row]
        width = max(len(p) for p in probs)
        padded = np.zeros((n, width), dtype=np.float32)
        for row, p in enumerate(probs):
            padded[row, : len(p)] = p
        return PolicyStep(
            replies=replies,
            actions=actions,
            token_log_probs=log_probs,
            values=values,
            states=None if any(s is None for s in states) else states,  # type: ignore[arg-type]
            action_probs=padded,
        )

    def _evaluate_in_groups(
        self,
        observations: Sequence[str],
        actions: Sequence[np.ndarray],
        states: Sequence[TurnStates | None] | None,
        evaluate: Evaluate,
    ) -> Evaluation:
        """``evaluate`` (the fixed-list ``evaluate_actions``) per group, merged in row order,
        with gradients flowing through every group."""
        order: list[int] = []
        parts: list[Evaluation] = []
        for group_actions, rows in state_groups(observations):
            sub_states = None if states is None else [states[r] for r in rows]
            with self._candidates_for(group_actions):
                parts.append(
                    evaluate(
                        [observations[r] for r in rows], [actions[r] for r in rows], sub_states
                    )
                )
            order.extend(rows)
        back = _inverse(order).to(self.device)
        choice = [p.choice_log_probs for p in parts]
        return Evaluation(
            token_log_probs=torch.cat([p.token_log_probs for p in parts])[back],
            mask=torch.cat([p.mask for p in parts])[back],
            entropy=torch.cat([p.entropy for p in parts])[back],
            values=torch.cat([p.values for p in parts])[back],
            choice_log_probs=None
            if any(c is None for c in choice)
            else pad_columns(choice, MASKED_LOGIT)[back],  # type: ignore[arg-type]
        )
