"""Is the policy learning or only exploring? Pure functions over a rollout's action distributions.

Entropy alone cannot tell: a policy that puts the same 50/50 on every state explores and ignores
its input (RAGEN-2's "template collapse": outputs stop depending on the input). These figures
separate the two, over the distinct observations of a choice-mode rollout, each weighted by how
often the rollout saw it:

- ``state_entropy``: mean over observations of ``H(p(. | o))`` (nats): how much it explores.
- ``mutual_information``: ``I(O; A) = H(mean_o p(. | o)) - mean_o H(p(. | o))`` (nats): how much
  the action depends on the observation; 0 when every state gets the same distribution.
- ``greedy_changed``: the share of observations (among those whose first greedy action is
  known) whose greedy action now differs from the one they had when first seen.
- ``committed_share``: the share of observations where some action has probability below
  :data:`COMMITTED_PROB`. PPO compares actions only by sampling them, so there the policy has
  stopped learning whether that action is better; on a noisy task a share near 1 while the
  return is short of the optimum is premature commitment (try ``min_action_prob``).
- ``turns_per_observation``: the rollout's turns over its distinct observations: how many
  samples each state's update rests on.

In generate mode there is no distribution to read, only the actions the parser took from the
sampled replies: :func:`sampled_diagnostics` estimates the first two figures from those counts
(plug-in estimates: with few replies per observation the entropy reads low and the mutual
information high) and raises the alarm on what the counts can show plainly.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

#: Below this probability an action counts as no longer tried (``committed_share``).
COMMITTED_PROB = 0.01
#: At most this many observations keep their first greedy action (greedy_changed's reference).
MAX_TRACKED = 100_000


def entropy(probs: np.ndarray) -> np.ndarray:
    """``-sum p log p`` over the last axis (0 log 0 = 0)."""
    p = np.clip(probs, 1e-12, 1.0)
    return -(probs * np.log(p)).sum(-1)  # type: ignore[no-any-return]


def distinct(
    observations: Sequence[str], probs: np.ndarray
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The distinct observations, their action distributions (first seen in the batch) and how
    often each occurs (weights summing to 1)."""
    index: dict[str, int] = {}
    for i, obs in enumerate(observations):
        index.setdefault(obs, i)
    keys = list(index)
    counts = np.array([0.0] * len(keys))
    position = {k: j for j, k in enumerate(keys)}
    for obs in observations:
        counts[position[obs]] += 1
    return keys, probs[[index[k] for k in keys]], counts / counts.sum()


def mutual_information(probs: np.ndarray, weights: np.ndarray) -> float:
    """``H(sum_o w_o p_o) - sum_o w_o H(p_o)`` for distributions ``probs`` ``(n, K)``."""
    marginal = (weights[:, None] * probs).sum(0)
    return float(entropy(marginal) - (weights * entropy(probs)).sum())


#: Below this share of ``log K`` the mutual information counts as zero, and below
#: :data:`COMMITTED_ENTROPY` the per-state entropy as committed (see :func:`input_ignored`).
IGNORED_INFORMATION, COMMITTED_ENTROPY = 0.01, 0.5


def input_ignored(figures: dict[str, float], n_actions: int) -> bool:
    """Whether a rollout's policy has committed to actions that do not depend on the input:
    per-state entropy under half of ``log K`` (it no longer explores much) while the mutual
    information is ~0 (every state gets the same distribution), over at least two distinct
    observations. It is the collapse that entropy alone does not show (slippery FrozenLake's
    input-independent policy); on a task whose best policy ignores the input it is a false
    alarm.

    >>> input_ignored({"state_entropy": 0.05, "mutual_information": 0.0,
    ...                "distinct_observations": 16.0}, n_actions=4)
    True
    >>> input_ignored({"state_entropy": 0.05, "mutual_information": 0.4,
    ...                "distinct_observations": 16.0}, n_actions=4)
    False
    """
    if n_actions < 2 or figures.get("distinct_observations", 0.0) < 2:
        return False
    scale = float(np.log(n_actions))
    return (
        figures["mutual_information"] < IGNORED_INFORMATION * scale
        and figures["state_entropy"] < COMMITTED_ENTROPY * scale
    )


def observation_key(observation: str) -> str:
    """A short stable digest of an observation: the memory of ``greedy_changed`` holds these,
    not the texts (conversations make long, never-repeated observations), and they are the
    same in a resumed process (``hash()`` of a str is not)."""
    return hashlib.blake2b(observation.encode("utf-8", "replace"), digest_size=8).hexdigest()


def choice_diagnostics(
    observations: Sequence[str], probs: np.ndarray, first_greedy: dict[str, int]
) -> dict[str, float]:
    """The three figures above for one rollout; ``first_greedy`` is updated with observations
    seen for the first time (their greedy action now)."""
    texts, dists, weights = distinct(observations, probs)
    keys = [observation_key(t) for t in texts]
    greedy = dists.argmax(-1)
    changed = [int(greedy[j]) != first_greedy[k] for j, k in enumerate(keys) if k in first_greedy]
    for j, key in enumerate(keys):
        if len(first_greedy) >= MAX_TRACKED:  # text games rarely repeat: bound the memory
            break
        first_greedy.setdefault(key, int(greedy[j]))
    return {
        "state_entropy": float((weights * entropy(dists)).sum()),
        "mutual_information": mutual_information(dists, weights),
        "greedy_changed": float(np.mean(changed)) if changed else 0.0,
        "distinct_observations": float(len(texts)),
        # zeros are the padding of shorter per-state action lists, not actions
        "committed_share": float(np.mean(np.where(dists > 0, dists, 1.0).min(-1) < COMMITTED_PROB)),
        "turns_per_observation": len(observations) / len(texts),
    }


def sampled_diagnostics(
    observations: Sequence[str], actions: Sequence[int], n_actions: int
) -> dict[str, float]:
    """``state_entropy``, ``mutual_information`` and ``distinct_observations`` from sampled
    actions (each observation's distribution is its share of each action among the replies
    sampled for it, weighted by how often it occurs), and ``input_ignored``.

    The plug-in mutual information is not ~0 for a collapsed policy: one stray reply among 64
    lifts it to ~0.03 nats, above :func:`input_ignored`'s threshold. So here the alarm asks
    instead whether every observation's most frequent action is the same one, with the
    per-state entropy under half of ``log K`` as there.

    >>> figures = sampled_diagnostics(["a", "a", "b", "b"], [0, 0, 1, 1], 2)
    >>> round(figures["mutual_information"], 4), figures["state_entropy"], figures["input_ignored"]
    (0.6931, 0.0, 0.0)
    >>> sampled_diagnostics(["a", "b", "a", "b"], [1, 1, 1, 1], 2)["input_ignored"]
    1.0
    """
    position: dict[str, int] = {}
    for obs in observations:
        position.setdefault(obs, len(position))
    counts = np.zeros((len(position), n_actions))
    for obs, action in zip(observations, actions, strict=True):
        counts[position[obs], action] += 1
    totals = counts.sum(1)
    dists, weights = counts / totals[:, None], totals / totals.sum()
    state_entropy = float((weights * entropy(dists)).sum())
    modes = {int(row.argmax()) if (row == row.max()).sum() == 1 else -1 for row in counts}
    ignored = (
        len(position) >= 2
        and n_actions >= 2
        and len(modes) == 1
        and -1 not in modes  # a tie in some observation is no evidence of a shared answer
        and state_entropy < COMMITTED_ENTROPY * float(np.log(n_actions))
    )
    return {
        "state_entropy": state_entropy,
        "mutual_information": max(0.0, mutual_information(dists, weights)),  # not -0.0
        "distinct_observations": float(len(position)),
        "input_ignored": float(ignored),
    }
