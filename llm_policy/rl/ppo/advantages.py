"""Advantage estimators over a rollout of turns, as pure numpy functions.

Arrays are ``(n_steps, n_envs)`` in rollout order, as in SB3's buffer. ``dones[t, e]`` is 1 when
the episode of env ``e`` ended at step ``t`` (so the next turn starts a new one). The estimators:

- ``"gae"``: turn-level GAE(γ, λ) with the critic (Schulman et al. 2016), SB3's exact recursion;
  the default.
- ``"rebn"``: the discounted return-to-go of each turn, normalised over the batch ("Return Batch
  Normalisation", GEM, Liu et al. 2025). No critic.
- ``"grpo"``: the episode's return relative to the other episodes of the rollout that began from
  the same observation, divided by their std (Shao et al. 2024); every turn of the episode gets it.
- ``"rloo"``: the same groups, leave-one-out mean as the baseline, no std (Ahmadian et al. 2024).
- ``"gigpo"``: GRPO's episode term plus a step term: each turn's return-to-go relative to the
  turns of the rollout that saw the *same observation text* (GiGPO's anchor states, Feng et al.
  2025); toy-text envs revisit states constantly, so these groups are large.
- ``"q"`` (choice mode): ``Q(s, a) - sum_b pi(b | s) Q(s, b)`` from action values learned
  off-policy on a replay of the run (:mod:`gym_llm.rl.ppo.q_critic`), not from this module.

Critic-free estimators see only what the rollout holds: an episode still running when the
rollout ends has no return yet, so its turns get advantage 0 in ``grpo``/``rloo``/``gigpo``'s
episode term and a return-to-go truncated at the rollout's end in ``rebn``/``gigpo``'s step
term. Choose ``n_steps`` longer than an episode for them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence
from typing import Literal

import numpy as np

Estimator = Literal["gae", "rebn", "grpo", "rloo", "gigpo", "q"]
ESTIMATORS: tuple[str, ...] = ("gae", "rebn", "grpo", "rloo", "gigpo", "q")
#: Estimators that need no critic: they read the rollout's rewards alone.
CRITIC_FREE: tuple[str, ...] = ("rebn", "grpo", "rloo", "gigpo")
#: Added to a std before dividing by it (GRPO's epsilon).
EPS = 1e-6


def check_estimator(name: str) -> Estimator:
    """``name`` if it is a known estimator, else a ValueError listing them."""
    if name not in ESTIMATORS:
        raise ValueError(
            f"Unknown advantage_estimator {name!r}: choose one of {', '.join(ESTIMATORS)}, or "
            "'auto' (q where PPO can learn action values, else gae)."
        )
    return name  # type: ignore[return-value]


def dones_from_starts(episode_starts: np.ndarray, last_dones: np.ndarray) -> np.ndarray:
    """``dones[t]`` from SB3's ``episode_starts`` (``starts[t + 1]``) and the rollout's last dones."""
    dones = np.zeros_like(episode_starts, dtype=np.float64)
    dones[:-1] = episode_starts[1:]
    dones[-1] = last_dones
    return dones


def gae(
    rewards: np.ndarray,
    values: np.ndarray,
    dones: np.ndarray,
    last_values: np.ndarray,
    gamma: float,
    gae_lambda: float,
) -> tuple[np.ndarray, np.ndarray]:
    """``(advantages, returns)`` by GAE; ``returns = advantages + values`` (the critic's target).

    Naive form: ``δ_t = r_t + γ V(s_{t+1}) (1 - done_t) - V(s_t)``,
    ``A_t = δ_t + γ λ (1 - done_t) A_{t+1}``.
    """
    advantages = np.zeros_like(rewards, dtype=np.float64)
    running = np.zeros(rewards.shape[1])
    next_values = np.asarray(last_values, dtype=np.float64)
    for t in reversed(range(rewards.shape[0])):
        alive = 1.0 - dones[t]
        delta = rewards[t] + gamma * next_values * alive - values[t]
        running = delta + gamma * gae_lambda * alive * running
        advantages[t] = running
        next_values = values[t]
    return advantages, advantages + values


def returns_to_go(rewards: np.ndarray, dones: np.ndarray, gamma: float) -> np.ndarray:
    """Discounted sum of the rewards from each turn to its episode's end (or the rollout's)."""
    out = np.zeros_like(rewards, dtype=np.float64)
    running = np.zeros(rewards.shape[1])
    for t in reversed(range(rewards.shape[0])):
        running = rewards[t] + gamma * (1.0 - dones[t]) * running
        out[t] = running
    return out


def rebn(rewards: np.ndarray, dones: np.ndarray, gamma: float) -> np.ndarray:
    """Return-to-go normalised over the batch: ``(G - mean(G)) / (std(G) + eps)``."""
    g = returns_to_go(rewards, dones, gamma)
    normalised: np.ndarray = (g - g.mean()) / (g.std() + EPS)
    return normalised


def group_relative(
    scores: Sequence[float], groups: Sequence[Hashable], baseline: Literal["mean", "loo"]
) -> np.ndarray:
    """Each score relative to the others of its group.

    ``"mean"`` (GRPO): ``(x - mean_g) / (std_g + eps)``. ``"loo"`` (RLOO): ``x - mean of the
    other members``. A group of one has no baseline: its advantage is 0.
    """
    values = np.asarray(scores, dtype=np.float64)
    members: dict[Hashable, list[int]] = defaultdict(list)
    for index, key in enumerate(groups):
        members[key].append(index)
    out = np.zeros_like(values)
    for idx in members.values():
        if len(idx) < 2:
            continue
        group = values[idx]
        if baseline == "mean":
            out[idx] = (group - group.mean()) / (group.std() + EPS)
        else:
            out[idx] = group - (group.sum() - group) / (len(idx) - 1)
    return out


def episodes(dones: np.ndarray, episode_starts: np.ndarray) -> list[list[tuple[int, int]]]:
    """The ``(t, e)`` turns of every episode of the rollout that both starts and ends in it."""
    found: list[list[tuple[int, int]]] = []
    steps, n_envs = dones.shape
    for env in range(n_envs):
        current: list[tuple[int, int]] | None = [] if episode_starts[0, env] else None
        for t in range(steps):
            if t > 0 and episode_starts[t, env]:
                current = []
            if current is not None:
                current.append((t, env))
            if dones[t, env]:
                if current is not None:
                    found.append(current)
                current = None
    return found


def episode_relative(
    rewards: np.ndarray,
    dones: np.ndarray,
    episode_starts: np.ndarray,
    observations: np.ndarray,
    baseline: Literal["mean", "loo"],
) -> np.ndarray:
    """GRPO/RLOO: each complete episode's (undiscounted) return against the episodes that began
    from the same observation; every turn of the episode gets that advantage."""
    found = episodes(dones, episode_starts)
    scores = [float(sum(rewards[t, e] for t, e in turns)) for turns in found]
    keys = [str(observations[turns[0]]) for turns in found]
    relative = group_relative(scores, keys, baseline)
    out = np.zeros_like(rewards, dtype=np.float64)
    for turns, value in zip(found, relative, strict=True):
        for t, e in turns:
            out[t, e] = value
    return out


def step_relative(
    rewards: np.ndarray, dones: np.ndarray, observations: np.ndarray, gamma: float
) -> np.ndarray:
    """GiGPO's step term: each turn's return-to-go against the turns with the same observation."""
    g = returns_to_go(rewards, dones, gamma)
    keys = [str(o) for o in observations.reshape(-1)]
    return group_relative(list(g.reshape(-1)), keys, "mean").reshape(rewards.shape)


def critic_free_advantages(
    estimator: Estimator,
    rewards: np.ndarray,
    dones: np.ndarray,
    episode_starts: np.ndarray,
    observations: np.ndarray,
    gamma: float,
) -> np.ndarray:
    """The advantages of a critic-free ``estimator`` (every one but ``"gae"``)."""
    if estimator == "rebn":
        return rebn(rewards, dones, gamma)
    if estimator in ("grpo", "rloo"):
        baseline: Literal["mean", "loo"] = "mean" if estimator == "grpo" else "loo"
        return episode_relative(rewards, dones, episode_starts, observations, baseline)
    if estimator == "gigpo":
        episode = episode_relative(rewards, dones, episode_starts, observations, "mean")
        combined: np.ndarray = episode + step_relative(rewards, dones, observations, gamma)
        return combined
    raise ValueError(f"{estimator!r} is not a critic-free estimator.")
