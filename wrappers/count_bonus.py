"""A count-based novelty bonus: reward for reaching what the agent has rarely seen.

Some tasks fail at *discovery*, not at credit assignment: the reward sits a few exact moves away
(a goal on FrozenLake, a maze's exit), and a policy peaked by its language prior may never
sample the path. A bonus ``scale / sqrt(N)`` on the count ``N`` of the state reached (MBIE-EB,
Strehl & Littman 2008; #Exploration, Tang et al. 2017; for LLM agents, MERCI) pays for new
states and fades for familiar ones. Text observations are hashable, so the counts are exact and
cost nothing. The bonus falls linearly to 0 over ``decay_steps`` so that the end of training
optimises the task's own reward, which is what an evaluation measures.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, Literal, SupportsFloat, cast

import gymnasium as gym
import numpy as np

#: What is counted: the state reached (``"next_state"``), or the state and the action taken in
#: it (``"state_action"``, for bandit-like tasks where every step starts from the same state).
CountKey = Literal["next_state", "state_action"]


def check_count_key(key: str, name: str = "key") -> CountKey:
    """``key`` as a :data:`CountKey`, or a ``ValueError`` naming the setting ``name``."""
    if key not in ("next_state", "state_action"):
        raise ValueError(f"{name} must be 'next_state' or 'state_action', got {key!r}.")
    return cast(CountKey, key)


def count_bonus(count: int, scale: float, step: int, decay_steps: int | None) -> float:
    """``scale / sqrt(count)``, with ``scale`` falling linearly from its value at step 0 to 0 at
    ``decay_steps`` (``None``: never decays).

    >>> count_bonus(1, 0.1, 0, None), count_bonus(4, 0.1, 0, None)
    (0.1, 0.05)
    >>> count_bonus(1, 0.1, 50, 100), count_bonus(1, 0.1, 100, 100)
    (0.05, 0.0)
    """
    if count < 1:
        raise ValueError(f"count must be >= 1 (the visit just made counts), got {count}.")
    remaining = 1.0 if decay_steps is None else max(0.0, 1.0 - step / decay_steps)
    return scale * remaining / math.sqrt(count)


def count_key(observation: Any) -> Hashable:
    """A hashable key for an observation: itself when hashable, its bytes for an array, its
    ``repr`` otherwise (dicts, lists)."""
    if isinstance(observation, np.ndarray):
        return (observation.dtype.str, observation.shape, observation.tobytes())
    try:
        hash(observation)
    except TypeError:
        return repr(observation)
    return observation  # type: ignore[no-any-return]


@dataclass
class NoveltyCounts:
    """Visit counts and the step count of the decay, shared by every copy of an env in a
    vectorised env (one object for all of them), so that a state is new once, not once per copy.
    """

    counts: Counter[Hashable] = field(default_factory=Counter)
    #: Env steps taken so far by every env that shares these counts.
    steps: int = 0

    def visit(self, key: Hashable) -> int:
        """Count one visit of ``key`` and one env step; the count after this visit."""
        self.counts[key] += 1
        self.steps += 1
        return self.counts[key]


class CountBonusWrapper(gym.Wrapper[Any, Any, Any, Any]):
    """Adds ``scale / sqrt(N)`` to each reward, ``N`` the count of the state reached (or of the
    state and action), ``scale`` decaying linearly to 0 over ``decay_steps`` env steps.

    Args:
        env: any env (raw or text); the keys are its observations (and actions).
        scale: the bonus of a first visit at step 0; about a tenth of the task's typical
            reward size is the published recipe's starting point.
        decay_steps: env steps (counted over every env sharing ``counts``) by which the bonus
            reaches 0; ``None`` keeps it for ever. Half the training budget is a sensible choice.
        key: ``"next_state"`` or ``"state_action"`` (see :data:`CountKey`).
        counts: a :class:`NoveltyCounts` to share between the copies of a vectorised env; a new
            one by default.

    ``info["intrinsic_reward"]`` holds the bonus and ``info["extrinsic_reward"]`` the env's own
    reward. Wrap *outside* SB3's ``Monitor`` so episode returns in the logs stay the task's own
    (``make_text_env(count_bonus=...)`` does). The counts live in memory: a resumed run starts
    them afresh.

    >>> env = CountBonusWrapper(gym.make("FrozenLake-v1", is_slippery=False), scale=0.1)
    >>> _ = env.reset(seed=0)
    >>> _, reward, _, _, info = env.step(2)  # right: a state never seen
    >>> reward, info["extrinsic_reward"]
    (0.1, 0.0)
    >>> _ = env.reset(seed=0)
    >>> _, reward, _, _, _ = env.step(2)  # the same state again: N = 2
    >>> round(reward, 4)
    0.0707
    """

    def __init__(
        self,
        env: gym.Env[Any, Any],
        scale: float = 0.1,
        decay_steps: int | None = None,
        key: CountKey = "next_state",
        counts: NoveltyCounts | None = None,
    ) -> None:
        super().__init__(env)
        if not math.isfinite(scale) or scale < 0:
            raise ValueError(f"scale must be a finite number >= 0, got {scale}.")
        if decay_steps is not None and decay_steps < 1:
            raise ValueError(f"decay_steps must be >= 1 or None, got {decay_steps}.")
        self.scale, self.decay_steps, self.key = scale, decay_steps, check_count_key(key)
        self.counts = counts if counts is not None else NoveltyCounts()
        self._state: Hashable = None

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        observation, info = self.env.reset(**kwargs)
        self._state = count_key(observation)
        return observation, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        reached = count_key(observation)
        visited = (self._state, count_key(action)) if self.key == "state_action" else reached
        step = self.counts.steps
        bonus = count_bonus(self.counts.visit(visited), self.scale, step, self.decay_steps)
        self._state = reached
        info = {**info, "intrinsic_reward": bonus, "extrinsic_reward": float(reward)}
        return observation, float(reward) + bonus, terminated, truncated, info
