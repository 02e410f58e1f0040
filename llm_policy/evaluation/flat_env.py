"""Classic agents' view of an env: flat float observations for SB3's ``MlpPolicy``.

The baselines gym_llm is compared with see the raw env, flattened: one-hots for discrete
observations, the numbers of a ``Box``, and of a ``Dict`` every numeric part (text parts such as
MiniGrid's ``mission`` are left out: a classic agent has no way to read them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from gym_llm.wrappers.resolver import action_sampler_seed


class OneHotObservation(gym.ObservationWrapper[np.ndarray, Any, Any]):
    """Flattens the observation for ``MlpPolicy``: ``Discrete`` → one-hot, ``Tuple`` of
    ``Discrete`` → concatenated one-hots, ``Box`` → flat float32 (``gymnasium.spaces.flatten``).

    >>> env = OneHotObservation(gym.make("Blackjack-v1"))
    >>> env.observation_space.shape  # 32 player sums + 11 dealer cards + 2 usable-ace values
    (45,)
    """

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        self.raw_space = env.observation_space
        #: Keys of a Dict observation left out because their samples are text (MiniGrid's
        #: ``mission``): a classic agent sees the rest (the image and the direction).
        self.dropped_keys: tuple[str, ...] = ()
        if isinstance(self.raw_space, spaces.Dict):
            self.dropped_keys = tuple(
                k for k, sub in self.raw_space.spaces.items() if not _numeric(sub)
            )
            if self.dropped_keys:
                self.raw_space = spaces.Dict(
                    {k: v for k, v in self.raw_space.spaces.items() if k not in self.dropped_keys}
                )
        flat = spaces.flatten_space(self.raw_space)
        if not isinstance(flat, spaces.Box):
            raise ValueError(
                f"Cannot flatten {self.raw_space} into a Box for MlpPolicy; wrap the env so its "
                "observation is Discrete, Tuple/Dict of Discrete or Box."
            )
        self.observation_space = spaces.Box(
            flat.low.astype(np.float32), flat.high.astype(np.float32), dtype=np.float32
        )

    def observation(self, observation: Any) -> np.ndarray:
        if self.dropped_keys:
            observation = {k: v for k, v in observation.items() if k not in self.dropped_keys}
        return flatten_observation(self.raw_space, observation)


def _numeric(space: spaces.Space[Any]) -> bool:
    """Whether a space's samples are numbers (and so flatten into a network's input)."""
    if isinstance(space, spaces.Box | spaces.Discrete | spaces.MultiDiscrete | spaces.MultiBinary):
        return True
    if isinstance(space, spaces.Tuple):
        return all(_numeric(s) for s in space.spaces)
    if isinstance(space, spaces.Dict):
        return all(_numeric(s) for s in space.spaces.values())
    return False


def flatten_observation(space: spaces.Space[Any], observation: Any) -> np.ndarray:
    """One raw observation as :class:`OneHotObservation` shows it to the network."""
    return np.asarray(spaces.flatten(space, observation), dtype=np.float32)


def make_flat_env(
    env_id: str, env_kwargs: Mapping[str, Any] | None = None, seed: int | None = None
) -> gym.Env[np.ndarray, Any]:
    """``gym.make(env_id, **env_kwargs)`` with flat observations, seeded when ``seed`` is given."""
    env = OneHotObservation(gym.make(env_id, **dict(env_kwargs or {})))
    if seed is not None:
        env.reset(seed=seed)
        env.action_space.seed(action_sampler_seed(seed))  # not the env's own stream
    return env
