"""Replay of text transitions, with n-step returns read off each env's own sequence of steps.

Steps are stored as SB3's ``ReplayBuffer`` stores them, ``[time, env]``, so the ``n`` steps that
follow a sampled step of one env are the next rows of its column. Observations are kept as
strings (the features are a per-prompt cache away, :class:`gym_llm.rl.dqn.DQN`), with the action
each turn took, its reward, whether the episode terminated or was cut there, and the behaviour
probabilities of every action at the moment it was sampled.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gym_llm.rl.dqn.targets import n_step_returns


@dataclass
class ReplaySample:
    """``B`` sampled steps: what the TD loss needs."""

    observations: list[str]
    actions: torch.Tensor  # (B,) long
    returns: torch.Tensor  # (B,) discounted sum of up to n rewards
    discounts: torch.Tensor  # (B,) gamma^m, 0 after a true end
    next_observations: list[str]  # the observation bootstrapped from
    behaviour_probs: torch.Tensor  # (B, K) what the action was sampled with


class TextReplayBuffer:
    """A ring of ``buffer_size`` env steps (``buffer_size // n_envs`` rows of ``n_envs``).

    Args:
        buffer_size: the env steps it holds, over all envs (SB3's meaning).
        n_envs: envs stepped together.
        n_actions: the number of listed actions.
    """

    def __init__(self, buffer_size: int, n_envs: int, n_actions: int) -> None:
        if buffer_size < n_envs:
            raise ValueError(
                f"buffer_size ({buffer_size}) must hold at least one step of each of the "
                f"{n_envs} envs."
            )
        self.rows, self.n_envs, self.n_actions = buffer_size // n_envs, n_envs, n_actions
        shape = (self.rows, n_envs)
        self.observations = np.empty(shape, dtype=object)
        self.next_observations = np.empty(shape, dtype=object)
        self.actions = np.zeros(shape, dtype=np.int64)
        self.rewards = np.zeros(shape, dtype=np.float32)
        self.terminated = np.zeros(shape, dtype=bool)
        self.ended = np.zeros(shape, dtype=bool)
        self.behaviour_probs = np.zeros((*shape, n_actions), dtype=np.float32)
        #: False where the env returned a non-finite reward: never drawn, never summed.
        self.valid = np.ones(shape, dtype=bool)
        self.pos, self.full = 0, False
        #: Steps added or loaded so far, which keys :meth:`_draw_probs`'s cache.
        self._writes = 0
        self._draw_cache: tuple[tuple[int, float], np.ndarray] | None = None
        #: Valid steps held per observation and action, kept once :meth:`plays` is first asked.
        self._plays: dict[str, np.ndarray] | None = None

    def __len__(self) -> int:
        """Env steps held."""
        return self.held_rows * self.n_envs

    @property
    def held_rows(self) -> int:
        """Rows (vector steps) held."""
        return self.rows if self.full else self.pos

    def _latest_rows(self, steps: int) -> np.ndarray:
        """Ring indices of the newest ``steps`` rows, oldest first."""
        return (self.pos - steps + np.arange(steps)) % self.rows

    def add(
        self,
        observations: Any,
        next_observations: Any,
        actions: np.ndarray,
        rewards: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        behaviour_probs: np.ndarray,
    ) -> None:
        """One step of every env. ``next_observations`` are the observations the actions led to
        (the final one where an episode ended, not the next episode's first).

        A non-finite reward is kept out of the values: its step is never drawn, and the sums of
        the steps before it stop there and bootstrap from its observation (the previous step is
        marked as a cut episode end)."""
        row = self.pos
        if self._plays is not None and self.full:  # the oldest steps leave the ring
            self._count(row, -1)
        self.observations[row] = [str(o) for o in observations]
        self.next_observations[row] = [str(o) for o in next_observations]
        self.actions[row] = np.asarray(actions).reshape(self.n_envs)
        given = np.asarray(rewards, dtype=np.float32).reshape(self.n_envs)
        self.valid[row] = np.isfinite(given)
        self.rewards[row] = np.where(self.valid[row], given, 0.0)
        self.terminated[row] = np.asarray(terminated, dtype=bool).reshape(self.n_envs)
        self.ended[row] = self.terminated[row] | np.asarray(truncated, dtype=bool).reshape(
            self.n_envs
        )
        self.behaviour_probs[row] = np.asarray(behaviour_probs, dtype=np.float32)
        if (self.full or row > 0) and not self.valid[row].all():
            self.ended[(row - 1) % self.rows, ~self.valid[row]] = True
        if self._plays is not None:
            self._count(row, 1)
        self.pos = (self.pos + 1) % self.rows
        self.full = self.full or self.pos == 0
        self._writes += 1

    def _count(self, row: int, sign: int) -> None:
        """Add (``sign`` 1) or take away (-1) one ring row's valid steps in :meth:`plays`."""
        assert self._plays is not None
        for obs, action, valid in zip(
            self.observations[row], self.actions[row], self.valid[row], strict=True
        ):
            if valid:
                counts = self._plays.setdefault(str(obs), np.zeros(self.n_actions, np.int64))
                counts[int(action)] += sign

    def plays(self, observations: Sequence[Any]) -> np.ndarray:
        """``(len(observations), K)``: how many valid steps held played each action from each
        observation (0 for one never held): what the behaviour floor steers toward with
        ``floor_balance``. Kept up to date step by step after the first call."""
        if self._plays is None:
            self._plays = {}
            for row in range(self.held_rows):
                self._count(row, 1)
        none = np.zeros(self.n_actions, np.int64)
        return np.stack([self._plays.get(str(o), none) for o in observations])

    def state_dict(self) -> dict[str, Any]:
        """The steps held, for a checkpoint a run resumes from: each distinct text once (a
        tensor file holds no object arrays) and every row as indices into them."""
        held = self.held_rows
        grids = (self.observations[:held], self.next_observations[:held])
        texts = list(dict.fromkeys(str(o) for grid in grids for o in grid.ravel()))
        index = {text: i for i, text in enumerate(texts)}

        def codes(grid: np.ndarray) -> torch.Tensor:
            flat = [index[str(o)] for o in grid.ravel()]
            return torch.tensor(flat, dtype=torch.int64).reshape(held, self.n_envs)

        return {
            "texts": texts,
            "observations": codes(grids[0]),
            "next_observations": codes(grids[1]),
            "actions": torch.from_numpy(self.actions[:held].copy()),
            "rewards": torch.from_numpy(self.rewards[:held].copy()),
            "terminated": torch.from_numpy(self.terminated[:held].copy()),
            "ended": torch.from_numpy(self.ended[:held].copy()),
            "behaviour_probs": torch.from_numpy(self.behaviour_probs[:held].copy()),
            "valid": torch.from_numpy(self.valid[:held].copy()),
            "position": torch.tensor([self.pos, int(self.full)]),
        }

    def fits(self, state: dict[str, Any]) -> bool:
        """Whether :meth:`state_dict`'s steps fit here: as many envs and actions, and room."""
        held, n_envs = state["actions"].shape
        n_actions = state["behaviour_probs"].shape[-1]
        return bool(held <= self.rows and n_envs == self.n_envs and n_actions == self.n_actions)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The steps of :meth:`state_dict` back in place, in the same ring positions.

        Raises:
            ValueError: they were saved from a replay of another size, env count or action
                count.
        """
        if not self.fits(state):
            held, n_envs = state["actions"].shape
            n_actions = state["behaviour_probs"].shape[-1]
            raise ValueError(
                f"The saved replay holds {held} rows of {n_envs} envs and {n_actions} actions; "
                f"this one has room for {self.rows} rows of {self.n_envs} envs and "
                f"{self.n_actions} actions. Load with the saved buffer_size, n_envs and actions."
            )
        held = state["actions"].shape[0]
        texts = np.array(state["texts"], dtype=object)
        self.observations[:held] = texts[state["observations"].numpy()]
        self.next_observations[:held] = texts[state["next_observations"].numpy()]
        self.actions[:held] = state["actions"].numpy()
        self.rewards[:held] = state["rewards"].numpy()
        self.terminated[:held] = state["terminated"].numpy()
        self.ended[:held] = state["ended"].numpy()
        self.behaviour_probs[:held] = state["behaviour_probs"].numpy()
        self.valid[:held] = state["valid"].numpy()
        self.pos, self.full = int(state["position"][0]), bool(state["position"][1])
        self._writes += 1
        self._plays = None  # counted again from the steps loaded when next asked

    def distinct_observations(self) -> list[str]:
        """The observations held, each once, in the order they were first stored."""
        held = self.observations[: len(self) // self.n_envs]
        return list(dict.fromkeys(str(o) for o in held.ravel()))

    def latest_valid(self, steps: int) -> np.ndarray:
        """``(steps, n_envs)``: whether each of the newest ``steps`` vector steps had a finite
        reward."""
        valid: np.ndarray = self.valid[self._latest_rows(steps)]
        return valid

    def latest(self, steps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The newest ``steps`` vector steps, oldest first: ``(steps, n_envs)`` observations and
        actions, and ``(steps, n_envs, K)`` behaviour probabilities."""
        if not 0 < steps <= self.held_rows:
            raise ValueError(f"The replay holds {self.held_rows} steps, not {steps}.")
        rows = self._latest_rows(steps)
        return self.observations[rows], self.actions[rows], self.behaviour_probs[rows]

    def _draw_probs(self, balance: float) -> np.ndarray:
        """:func:`pair_draw_probs` of the steps held (row-major over ``[row, env]``), computed
        once per step added."""
        key = (self._writes, balance)
        if self._draw_cache is None or self._draw_cache[0] != key:
            held = self.held_rows
            probs = pair_draw_probs(
                self.observations[:held].ravel(),
                self.actions[:held].ravel(),
                self.valid[:held].ravel(),
                balance,
            )
            self._draw_cache = (key, probs)
        return self._draw_cache[1]

    def add_step(
        self,
        observations: Any,
        new_observations: Any,
        actions: np.ndarray,
        rewards: np.ndarray,
        dones: np.ndarray,
        infos: list[dict[str, Any]],
        behaviour_probs: np.ndarray,
    ) -> None:
        """One vector step as SB3's ``VecEnv.step`` returns it: where an episode ended, the next
        observation is its final one (``infos[i]["terminal_observation"]``), and an episode cut
        by a time limit (``TimeLimit.truncated``) ended without terminating."""
        next_obs = [str(o) for o in new_observations]
        truncated = np.array([bool(i.get("TimeLimit.truncated", False)) for i in infos])
        for i, done in enumerate(dones):
            if done and infos[i].get("terminal_observation") is not None:
                next_obs[i] = str(infos[i]["terminal_observation"])
        self.add(
            observations, next_obs, actions, rewards,
            np.asarray(dones, dtype=bool) & ~truncated, truncated, behaviour_probs,
        )  # fmt: skip

    def sample(
        self,
        batch_size: int,
        n_steps: int,
        gamma: float,
        rng: np.random.Generator,
        follows: Callable[[list[str], np.ndarray], np.ndarray] | None = None,
        balance: float = 0.0,
    ) -> ReplaySample:
        """``batch_size`` steps drawn with their ``n_steps`` returns. Near the newest row the
        look-ahead is cut where the data ends and bootstraps from there.

        ``balance`` (β) draws a step with probability ∝ ``n(s, a)^-β``, ``n`` the steps held
        with its observation and action: 0 draws every step alike; 1 gives every (observation,
        action) pair held the same share, so a move played rarely is fitted as often as one
        played every time (:func:`pair_draw_probs`).

        ``follows`` (observations, actions -> whether the policy whose values are learned would
        take each action there) also cuts it before the first later step whose action it would
        not take (Watkins's Q(lambda)): the rewards summed are then that policy's, not the
        behaviour's."""
        held = self.held_rows
        if balance < 0:
            raise ValueError(f"balance must be >= 0 (0: every step alike), got {balance}.")
        if held == 0:
            raise ValueError("The replay buffer is empty: collect steps before sampling.")
        if not self.valid[:held].any():
            raise ValueError("Every step held has a non-finite reward: nothing to learn from.")
        if balance > 0:  # one draw over every (row, env) held, invalid steps at probability 0
            cells = rng.choice(held * self.n_envs, size=batch_size, p=self._draw_probs(balance))
            rows, envs = np.divmod(cells, self.n_envs)
        else:
            rows = rng.integers(held, size=batch_size)
            if self.full:  # row indices counted from the oldest row
                rows = (self.pos + rows) % self.rows
            envs = rng.integers(self.n_envs, size=batch_size)
        while not (valid := self.valid[rows, envs]).all():  # draw those again (rarely any)
            again = int((~valid).sum())
            rows[~valid] = (self.pos * self.full + rng.integers(held, size=again)) % self.rows
            envs[~valid] = rng.integers(self.n_envs, size=again)
        ahead = (rows[:, None] + np.arange(n_steps)[None, :]) % self.rows  # (B, n)
        written = (self.pos - 1 - rows) % self.rows + 1  # rows from each up to the newest
        available = np.arange(n_steps)[None, :] < written[:, None]
        rewards = self.rewards[ahead, envs[:, None]] * available
        terminated = self.terminated[ahead, envs[:, None]] & available
        ended = self.ended[ahead, envs[:, None]] & available
        last_available = np.minimum(written, n_steps) - 1
        ended[np.arange(batch_size), last_available] = True  # the data ends: cut, bootstrap
        if follows is not None and n_steps > 1:
            later_held: np.ndarray = available[:, 1:]  # (B, n - 1): later steps the data holds
            later = self.observations[ahead[:, 1:], envs[:, None]][later_held]
            taken = self.actions[ahead[:, 1:], envs[:, None]][later_held]
            leaves = np.zeros(later_held.shape, dtype=bool)
            leaves[later_held] = ~np.asarray(follows([str(o) for o in later], taken), dtype=bool)
            ended[:, :-1] |= leaves  # bootstrap from the state whose action left it
        returns, discounts, last = n_step_returns(
            torch.as_tensor(rewards), torch.as_tensor(terminated), torch.as_tensor(ended), gamma
        )
        bootstrap_rows = ahead[np.arange(batch_size), last.numpy()]
        return ReplaySample(
            observations=list(self.observations[rows, envs]),
            actions=torch.as_tensor(self.actions[rows, envs]),
            returns=returns,
            discounts=discounts,
            next_observations=list(self.next_observations[bootstrap_rows, envs]),
            behaviour_probs=torch.as_tensor(self.behaviour_probs[rows, envs]),
        )


def pair_draw_probs(
    observations: np.ndarray, actions: np.ndarray, valid: np.ndarray, balance: float
) -> np.ndarray:
    """Each step's probability of being drawn, ∝ ``n(s, a)^-balance`` with ``n`` the valid
    steps sharing its observation and action; 0 for an invalid step.

    >>> pair_draw_probs(np.array(["x", "x", "x", "y"]), np.array([0, 0, 0, 0]),
    ...                 np.ones(4, bool), 1.0).round(3).tolist()
    [0.167, 0.167, 0.167, 0.5]
    """
    if balance < 0:
        raise ValueError(f"balance must be >= 0 (0: every step alike), got {balance}.")
    ids: dict[tuple[str, int], int] = {}  # texts hashed, not copied into a fixed-width array
    pair = np.array(
        [
            ids.setdefault((str(o), int(a)), len(ids))
            for o, a in zip(observations, actions, strict=True)
        ]
    )
    counts = np.bincount(pair[valid], minlength=len(ids)).astype(np.float64)
    weights = np.where(valid, np.maximum(counts[pair], 1.0) ** -balance, 0.0)
    return weights / weights.sum()  # type: ignore[no-any-return]
