"""``DescribesItself``: how an env with numeric spaces tells the text wrappers what it means.

A text-native env could speak text on both sides (like ``KeywordBandit``), but then a classic RL
agent (SB3's PPO/DQN with ``MlpPolicy``) cannot play it, and comparing the two on the *same* env
is the point of the benchmarks. So ``GuessNumber`` and ``TextMaze`` keep ``Discrete`` observation
and action spaces, and describe themselves instead: :class:`gym_llm.wrappers.TextObservationWrapper`
takes ``describe`` as its formatter and ``instruction`` as the system prompt, and
:class:`gym_llm.wrappers.ActionParserWrapper` lists ``action_names`` as the valid replies. Any
user env can implement the same three members (no base class needed: the check is structural).

Wrapper arguments still win: ``formatter=``, ``instruction=`` and ``action_names=`` override what
the env says about itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class DescribesItself(Protocol):
    """An env (checked on ``env.unwrapped``) that provides its own text.

    >>> import gymnasium as gym
    >>> import gym_llm
    >>> env = gym.make("gym_llm/GuessNumber-v0")
    >>> isinstance(env.unwrapped, DescribesItself)
    True
    """

    #: The task for the model: rules, goal, what a good outcome is (the system prompt).
    instruction: str
    #: The names of the Discrete actions in index order (what the model may reply).
    action_names: Sequence[str]

    def describe(self, observation: Any) -> str:
        """The text of one observation (it must contain everything the policy needs)."""
        ...


def self_description(env: Any) -> DescribesItself | None:
    """``env.unwrapped`` if it describes itself, else ``None``."""
    unwrapped = getattr(env, "unwrapped", env)
    return unwrapped if isinstance(unwrapped, DescribesItself) else None
