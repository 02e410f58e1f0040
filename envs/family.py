"""``gym_llm/Family-v0``: a family of small text tasks with known optima, and a held-out split.

Defaults tuned on one task can fit that task only (defaults chosen on one task once learned its
look-alike on 1 of 2 seeds). So learning claims are made on a *family* of tasks, split in two:
recipes and defaults are chosen on :data:`TUNING`, and reported on :data:`HELD_OUT`, whose
phrasings and generator seeds nobody looked at while tuning.

A task is named ``KIND-pPHRASING-sSEED`` (e.g. ``compare-p1-s0``); see
:mod:`gym_llm.envs.family_tasks` for the kinds. Every name makes a valid task, so a user can
draw fresh tasks beyond both splits:

>>> import gymnasium as gym
>>> import gym_llm
>>> env = gym.make("gym_llm/Family-v0", task="compare-p1-s0")
>>> env.unwrapped.action_names
('Bob', 'Alice')
>>> env.unwrapped.describe(env.reset(seed=0)[0]).startswith("Alice scored")
True

The env keeps ``Discrete`` spaces and describes itself (:class:`~gym_llm.envs.DescribesItself`),
so classic agents play it too, and lists its transitions in Gymnasium's toy-text format (``P``,
``initial_state_distrib``) with its own step limit (``horizon``): the exact evaluation in
:mod:`gym_llm.evaluation.exact` gives any policy's expected return, the optimum and the random
policy's return by dynamic programming.
"""

from __future__ import annotations

import re
import zlib
from functools import cached_property
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from gym_llm.envs.family_tasks import KINDS, PHRASINGS, Task
from gym_llm.envs.tabular import TabularModel

ENV_ID = "gym_llm/Family-v0"

#: The tuning split: phrasings 0-1 with generator seeds 0-1, one task per kind.
TUNING: tuple[str, ...] = (
    "threshold-p0-s0",
    "range-p1-s1",
    "compare-p0-s1",
    "membership-p1-s0",
    "walk-p0-s0",
    "grid-p1-s1",
)
#: The held-out split: phrasings 2-3 and generator seeds from 100, never used for tuning.
HELD_OUT: tuple[str, ...] = (
    "threshold-p2-s100",
    "range-p3-s101",
    "compare-p3-s100",
    "membership-p2-s101",
    "walk-p3-s101",
    "grid-p2-s100",
)
#: The noisy kinds' tuning split (chance rewards, slippery moves, random draws), chosen as above.
NOISY_TUNING: tuple[str, ...] = (
    "weather-p0-s0",
    "ice-p1-s0",
    "dice-p0-s1",
    "cards-p1-s1",
    "deck-p0-s1",
)
#: The noisy kinds' held-out split.
NOISY_HELD_OUT: tuple[str, ...] = (
    "weather-p2-s100",
    "ice-p3-s101",
    "dice-p2-s100",
    "cards-p3-s100",
    "deck-p2-s101",
)
SPLITS: dict[str, tuple[str, ...]] = {
    "tuning": TUNING,
    "held-out": HELD_OUT,
    "noisy-tuning": NOISY_TUNING,
    "noisy-held-out": NOISY_HELD_OUT,
}

_NAME = re.compile(r"(?P<kind>[a-z]+)-p(?P<phrasing>\d+)-s(?P<seed>\d+)")


def make_task(name: str) -> Task:
    """The task called ``KIND-pPHRASING-sSEED``.

    Raises:
        ValueError: a name that does not read so, an unknown kind or a phrasing out of range;
            the message lists what is valid.
    """
    match = _NAME.fullmatch(name)
    if match is None:
        raise ValueError(
            f"task {name!r} must read KIND-pPHRASING-sSEED, e.g. 'compare-p1-s0'; kinds: "
            f"{', '.join(KINDS)}; phrasings 0-{PHRASINGS - 1}; any seed >= 0."
        )
    kind, phrasing, seed = match["kind"], int(match["phrasing"]), int(match["seed"])
    if kind not in KINDS:
        raise ValueError(f"task {name!r}: unknown kind {kind!r}; kinds: {', '.join(KINDS)}.")
    if phrasing >= PHRASINGS:
        raise ValueError(f"task {name!r}: phrasing must be 0-{PHRASINGS - 1}, got {phrasing}.")
    # The kind is mixed into the seed so that two kinds with one seed draw unrelated constants.
    rng = np.random.default_rng([seed, zlib.crc32(kind.encode())])
    return KINDS[kind](name, rng, phrasing)


class FamilyEnv(gym.Env[np.int64, np.int64]):
    """One task of the family as a Gymnasium env.

    Observation: ``Discrete(n_states)``, the state's index (its text is :meth:`describe`);
    action: ``Discrete(n_actions)`` over :attr:`action_names`. The one-step kinds end after the
    reply (1 for the right word, else 0; the noisy ``weather`` pays by chance); the walking kinds
    pay −0.05 a move and 1 at the goal, and are truncated after :attr:`horizon` moves. The
    noisy kinds draw their outcomes from the env's ``np_random``.

    Args:
        task: ``KIND-pPHRASING-sSEED`` (:func:`make_task`); default the first tuning task.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012

    def __init__(self, task: str = TUNING[0]) -> None:
        self.task = make_task(task)
        self.instruction: str = self.task.instruction
        self.action_names: tuple[str, ...] = self.task.action_names
        self.horizon: int = self.task.horizon
        n_states = len(self.task.texts)
        self.n_actions = len(self.action_names)
        self.observation_space = spaces.Discrete(n_states)
        self.action_space = spaces.Discrete(len(self.action_names))
        self.initial_state_distrib = np.zeros(n_states)
        # a state listed twice in ``starts`` is twice as likely (as ``reset``'s draw makes it)
        np.add.at(self.initial_state_distrib, list(self.task.starts), 1.0 / len(self.task.starts))
        self._state: int | None = None
        self._moves = 0

    def describe(self, observation: Any) -> str:
        return self.task.texts[int(observation)]

    @cached_property
    def P(self) -> dict[int, dict[int, list[tuple[float, int, float, bool]]]]:
        """Toy-text transitions ``P[s][a] = [(prob, next, reward, terminated), ...]`` (a
        terminal move points back at ``s``)."""
        return {
            s: {
                a: [(prob, s if nxt is None else nxt, reward, nxt is None)
                    for prob, nxt, reward in outcomes]
                for a, outcomes in enumerate(row)
            }
            for s, row in enumerate(self.task.moves)
        }  # fmt: skip

    @cached_property
    def _model(self) -> TabularModel:
        return TabularModel.of(self)

    @cached_property
    def optimal_return(self) -> float:
        return self._model.optimum()

    @cached_property
    def random_return(self) -> float:
        return self._model.value(np.full(self._model.reward.shape, 1.0 / self.n_actions))

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.int64, dict[str, Any]]:
        super().reset(seed=seed)
        self._state = int(self.np_random.choice(self.task.starts))
        self._moves = 0
        return np.int64(self._state), {}

    def step(self, action: Any) -> tuple[np.int64, float, bool, bool, dict[str, Any]]:
        if self._state is None:
            raise RuntimeError("The episode has ended: call reset() before step().")
        if not self.action_space.contains(action):
            raise ValueError(
                f"action must be an int in 0..{self.n_actions - 1} "
                f"({', '.join(self.action_names)}), got {action!r}."
            )
        outcomes = self.task.moves[self._state][int(action)]
        # a sure move draws nothing, so the deterministic kinds replay as they always have
        pick = 0
        if len(outcomes) > 1:
            draw = self.np_random.random()
            cumulative = np.cumsum([prob for prob, _, _ in outcomes])
            pick = min(int(np.searchsorted(cumulative, draw, side="right")), len(outcomes) - 1)
        _, nxt, reward = outcomes[pick]
        self._moves += 1
        terminated = nxt is None
        truncated = not terminated and self._moves >= self.horizon
        observation = np.int64(self._state if nxt is None else nxt)
        self._state = None if terminated or truncated else int(observation)
        return observation, float(reward), terminated, truncated, {}
