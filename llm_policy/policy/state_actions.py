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

from collections.abc import Sequence

import torch

from gym_llm.spaces import actions_of

#: The logit of an action a state does not have: its probability is exactly 0.
MASKED_LOGIT = -1e9


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


def inverse(order: list[int]) -> torch.Tensor:
    inverse = torch.empty(len(order), dtype=torch.long)
    inverse[torch.tensor(order, dtype=torch.long)] = torch.arange(len(order))
    return inverse


def pad_columns(tensors: Sequence[torch.Tensor], value: float) -> torch.Tensor:
    """``(n_g, K_g)`` tensors stacked as ``(sum n_g, max K_g)``, padded with ``value``."""
    width = max(t.shape[1] for t in tensors)
    return torch.cat(
        [torch.nn.functional.pad(t, (0, width - t.shape[1]), value=value) for t in tensors]
    )
