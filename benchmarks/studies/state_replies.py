"""What a policy replies in each state of a family task, and what that says about learning.

A greedy value that stops at a constant reply's value (generate mode on a threshold task stays at
0.7, the value of answering ``sell`` everywhere) can mean two different things: the policy has
stopped moving, or it moves every state the same way. The exact value cannot tell them apart;
the replies per state can. For each state this records the greedy reply, the action it parses to
(or none), and how the policy's *sampled* replies spread over the actions and "invalid". From
those, :func:`reply_figures` gives the share of states answered right greedily, how many distinct
greedy actions there are, the mean sampled probability of a right action, the invalid share, and
the mutual information between state and sampled action (0 when the replies ignore the state).

``python -m benchmarks.recipes.family_sweep run --replies N`` adds these to every curve point.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

INVALID = -1


def best_actions(task: str) -> list[list[int]]:
    """Per state, every action with the highest action value (the optimum's choices)."""
    from gym_llm.envs.family import FamilyEnv
    from gym_llm.envs.tabular import TabularModel

    q = TabularModel.of(FamilyEnv(task)).q_values()
    return [np.flatnonzero(np.isclose(row, row.max())).tolist() for row in q]


def state_texts(task: str) -> tuple[list[str], Any]:
    """Every state's observation text of a family task, in state order, and the parser the
    training env reads replies with (an ``ActionParserWrapper``: ``.parse(reply)``)."""
    import gymnasium as gym

    from gym_llm.wrappers import ActionParserWrapper, TextObservationWrapper

    inner = gym.make("gym_llm/Family-v0", task=task)
    text_env = TextObservationWrapper(inner)
    texts = [text_env.format(s) for s in range(int(inner.observation_space.n))]
    return texts, ActionParserWrapper(text_env)


def state_replies(model: Any, task: str, samples: int) -> dict[str, Any]:
    """The greedy reply, its parsed action (``-1``: invalid) and the counts of ``samples``
    sampled replies' actions (the last column: invalid) for every state of ``task``.

    The sampling runs under a forked torch RNG, so a run that records replies trains exactly as
    one that does not.
    """
    texts, parser = state_texts(task)
    n_states, n_actions = len(texts), int(parser.env.action_space.n)
    parser.close()

    def parse(reply: Any) -> int:
        parsed = parser.parse(str(reply))
        return int(parsed.action) if parsed.valid else INVALID

    greedy, _ = model.predict(texts, deterministic=True)
    counts = np.zeros((n_states, n_actions + 1), dtype=np.int64)
    with torch.random.fork_rng(devices=[]):
        sampled, _ = model.predict([t for t in texts for _ in range(samples)])
    for i, reply in enumerate(sampled):
        counts[i // samples, parse(reply)] += 1  # INVALID (-1) is the last column
    return {
        "greedy": [str(r) for r in greedy],
        "greedy_action": [parse(r) for r in greedy],
        "sampled": counts.tolist(),
    }


def reply_figures(
    best: Sequence[Sequence[int]], greedy_action: Sequence[int], sampled: Sequence[Sequence[int]]
) -> dict[str, float]:
    """Per-state figures from :func:`state_replies` (``sampled``'s last column: invalid).

    >>> f = reply_figures([[0], [1]], [1, 1], [[2, 2, 0], [0, 3, 1]])
    >>> f["greedy_right"], f["greedy_distinct"], f["p_right"], f["invalid"]
    (0.5, 1.0, 0.625, 0.125)
    """
    counts = np.asarray(sampled, dtype=float)
    totals = counts.sum(axis=1)
    p_right = [
        counts[s, list(best[s])].sum() / totals[s] for s in range(len(best)) if totals[s] > 0
    ]
    valid = [a for a in greedy_action if a != INVALID]
    return {
        "greedy_right": sum(a in b for a, b in zip(greedy_action, best, strict=True)) / len(best),
        "greedy_distinct": float(len(set(valid))),
        "p_right": float(np.mean(p_right)) if p_right else math.nan,
        "invalid": float(counts[:, -1].sum() / counts.sum()) if counts.sum() else math.nan,
        "mutual_information": mutual_information(counts[:, :-1]),
    }


def mutual_information(counts: np.ndarray) -> float:
    """I(state; action) in nats of a ``[state, action]`` count table, states weighted equally
    (each state's row normalised; rows without counts are left out): the rollout diagnostic
    :func:`gym_llm.rl.common.diagnostics.mutual_information` on sampled counts.

    >>> round(mutual_information(np.array([[4, 0], [0, 4]])), 4)  # action = state: ln 2
    0.6931
    >>> mutual_information(np.array([[2, 2], [1, 1]]))  # the same spread everywhere: none
    0.0
    """
    from gym_llm.rl.common.diagnostics import mutual_information as information

    rows = counts[counts.sum(axis=1) > 0].astype(float)
    if len(rows) == 0:
        return math.nan
    weights = np.full(len(rows), 1.0 / len(rows))
    return max(0.0, information(rows / rows.sum(axis=1, keepdims=True), weights))
