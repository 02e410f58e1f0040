"""An env's transition model as arrays, for exact evaluation by dynamic programming.

Any env that lists its transitions as Gymnasium's toy-text envs do (``P[state][action] =
[(prob, next, reward, terminated), ...]`` and ``initial_state_distrib``) can be evaluated exactly:
FrozenLake, Taxi, CliffWalking and gym_llm's GuessNumber and TextMaze. It lives beside the envs
(not in ``gym_llm.evaluation``) so an env can state its own optimum without importing upwards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np


@dataclass(frozen=True)
class TabularModel:
    """An env's dynamics as arrays, with the episode's step limit as the horizon.

    ``reward[s, a]`` is the expected immediate reward; ``cont[s, a, s']`` the probability of moving
    to ``s'`` *without* the episode ending, so ``reward + cont @ V`` is one step of a
    finite-horizon backup.
    """

    reward: np.ndarray
    cont: np.ndarray
    initial: np.ndarray
    horizon: int

    @classmethod
    def of(cls, env: gym.Env[Any, Any]) -> TabularModel:
        unwrapped: Any = env.unwrapped
        n_states, n_actions = len(unwrapped.P), int(env.action_space.n)  # type: ignore[attr-defined]
        reward = np.zeros((n_states, n_actions))
        cont = np.zeros((n_states, n_actions, n_states))
        for state, moves in unwrapped.P.items():
            for action, outcomes in moves.items():
                for prob, nxt, rew, done in outcomes:
                    reward[state, action] += prob * rew
                    if not done:
                        cont[state, action, int(nxt)] += prob
        horizon = env.spec.max_episode_steps if env.spec is not None else None
        if horizon is None:  # text-native envs state their own longest episode
            horizon = getattr(unwrapped, "horizon", None)
        if horizon is None:
            raise ValueError(
                f"{env.spec.id if env.spec else env} has no step limit, so a policy that never "
                "finishes has no finite return: pass max_episode_steps=... (e.g. 100)."
            )
        initial = np.asarray(unwrapped.initial_state_distrib, dtype=np.float64)
        return cls(reward, cont, initial, int(horizon))

    def value(self, policy: np.ndarray) -> float:
        """Expected return of ``policy[s, a]`` (action probabilities) within the horizon."""
        v = np.zeros(len(self.reward))
        q_weighted = (policy * self.reward).sum(-1)
        transition = np.einsum("sa,sat->st", policy, self.cont)
        for _ in range(self.horizon):
            v = q_weighted + transition @ v
        return float(self.initial @ v)

    def optimum(self) -> float:
        """The best expected return within the horizon (finite-horizon value iteration)."""
        return float(self.initial @ self.q_values().max(-1))

    def q_values(self, gamma: float = 1.0, sweeps: int | None = None) -> np.ndarray:
        """``Q*[s, a]`` with the whole horizon left: what each first action is worth when played
        optimally after (the target of value learning, and which actions are right).

        ``gamma`` discounts each later step; ``sweeps`` backups replace the horizon's, so a
        large number gives the discounted values with no step limit (the fixed point of a TD
        target that bootstraps through truncation)."""
        if not 0 <= gamma <= 1:
            raise ValueError(f"gamma must be a discount in [0, 1], got {gamma}.")
        v = np.zeros(len(self.reward))
        q = self.reward.copy()
        for _ in range(self.horizon if sweeps is None else sweeps):
            q = self.reward + gamma * (self.cont @ v)
            v = q.max(-1)
        return q
