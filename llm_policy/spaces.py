"""Text spaces that carry the policy's contract.

SB3 builds a policy from the observation and action spaces alone, so everything an LLM policy needs
to write its prompt must travel inside them: the task instruction rides on the observation space,
the list of valid action strings on the action space.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
from gymnasium import spaces

from gym_llm.grammar import CharAutomaton

#: Characters the built-in formatters may emit. ``gymnasium.spaces.Text`` defaults to alphanumerics
#: only, which would reject spaces, newlines and punctuation that every readable observation has.
TEXT_CHARSET: str = string.printable + "°±·→←↑↓×…–—’“”é"

#: Long enough for a grid plus a few history lines; raise it with ``max_length=`` for longer texts.
DEFAULT_OBS_MAX_LENGTH = 8192
#: Free-text replies can be long (chain of thought); the parser reads any length anyway.
DEFAULT_ACTION_MAX_LENGTH = 4096


def _hold_strings_in_buffers(space: spaces.Text) -> None:
    """Give a text space the shape ``()`` and dtype ``object``: SB3's ``DummyVecEnv`` (which
    ``evaluate_policy(model, env)`` wraps a single env in) allocates its observation buffer from
    them, and an object array holds whole strings (``Text``'s own ``shape=None`` crashed it)."""
    space._shape = ()
    space.dtype = np.dtype(object)


class TextObservations(spaces.Text):
    """A :class:`gymnasium.spaces.Text` that also carries the task instruction.

    The instruction is the static part of every prompt (the system message): keeping it on the
    space lets a policy built from spaces alone show it to the model, and lets it be encoded once.
    ``max_length``, ``min_length``, ``charset`` and ``seed`` are ``gymnasium.spaces.Text``'s
    (``charset`` defaults to printable text, not ``Text``'s alphanumerics).
    """

    def __init__(
        self,
        max_length: int = DEFAULT_OBS_MAX_LENGTH,
        *,
        min_length: int = 0,
        charset: str | frozenset[str] = TEXT_CHARSET,
        instruction: str | None = None,
        seed: int | np.random.Generator | None = None,
    ) -> None:
        super().__init__(max_length, min_length=min_length, charset=charset, seed=seed)
        self.instruction = instruction
        _hold_strings_in_buffers(self)

    def __repr__(self) -> str:
        return f"TextObservations(max_length={self.max_length}, instruction={self.instruction!r})"


class TextWithActions(str):
    """An observation that carries the valid actions of its state (a text game's admissible
    commands), so a policy in choice mode scores exactly those. It is a ``str`` (every env,
    wrapper and parser takes it unchanged; string methods return plain ``str``).

    The text must determine the actions (the same text never comes with another set):
    :class:`gym_llm.wrappers.ValidActionsWrapper` ensures it by listing them in the text.

    >>> o = TextWithActions("You see a coin.", ["take coin", "look"])
    >>> o == "You see a coin.", o.actions
    (True, ('take coin', 'look'))
    """

    actions: tuple[str, ...]

    def __new__(cls, text: str, actions: Sequence[str]) -> TextWithActions:
        observation = super().__new__(cls, text)
        observation.actions = tuple(str(a) for a in actions)
        return observation

    def __reduce__(self) -> tuple[Any, ...]:  # pickled across subprocess vec envs
        return (TextWithActions, (str(self), self.actions))


def actions_of(observation: Any) -> tuple[str, ...] | None:
    """The valid actions an observation carries (:class:`TextWithActions`), else ``None``."""
    return getattr(observation, "actions", None)


class TextActions(spaces.Text):
    """A :class:`gymnasium.spaces.Text` for replies, listing the valid action strings if closed.

    Any string is a legal *reply* (the parser decides what it means), so ``contains`` accepts every
    string. ``actions`` is the ordered list of valid action names for a Discrete env (index ``i`` is
    env action ``start + i``), or ``None`` when the set is open (Box, MultiDiscrete: numbers in text).
    A policy in ``choice`` mode scores exactly these strings. ``per_state=True`` (with
    ``actions=None``) says each observation brings its own list (:class:`TextWithActions`).
    ``description`` tells the model how to reply (the prompt shows it); ``sampler`` draws a valid
    reply for an open set, so ``sample()`` always gives one the parser accepts; ``pattern``, a
    regular expression a valid reply matches in full, lets generate mode decode only such replies
    (:mod:`gym_llm.grammar`). ``max_length``,
    ``charset`` and ``seed`` are ``gymnasium.spaces.Text``'s (for the replies ``sample()`` draws).
    """

    def __init__(
        self,
        actions: Sequence[str] | None = None,
        *,
        max_length: int = DEFAULT_ACTION_MAX_LENGTH,
        charset: str | frozenset[str] = TEXT_CHARSET,
        sampler: Callable[[np.random.Generator], str] | None = None,
        description: str | None = None,
        seed: int | np.random.Generator | None = None,
        per_state: bool = False,
        pattern: str | None = None,
    ) -> None:
        if per_state and actions is not None:
            raise ValueError("TextActions(per_state=True) takes no fixed actions list.")
        if actions is not None:
            actions = tuple(actions)
            if not actions:
                raise ValueError("TextActions(actions=...) needs at least one action string.")
            if len(set(actions)) != len(actions):
                raise ValueError(f"TextActions action strings must be unique, got {actions!r}.")
            if any(not isinstance(a, str) or not a.strip() for a in actions):
                raise ValueError(
                    f"TextActions action strings must be non-empty str, got {actions!r}."
                )
        self.actions: tuple[str, ...] | None = actions
        #: The valid actions come with each observation (:class:`TextWithActions`).
        self.per_state = bool(per_state)
        #: Draws a valid reply for open sets (numbers as text), so ``sample()`` is always parseable.
        self.sampler = sampler
        #: What to reply, in words, for the prompt ("Reply with one of: stick, hit.").
        self.description = description
        if pattern is not None:
            CharAutomaton(pattern)  # a pattern a token mask cannot follow fails here, clearly
        #: A regular expression every valid reply matches in full (open action spaces).
        self.pattern = pattern
        super().__init__(max_length, min_length=0, charset=charset, seed=seed)

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """A valid reply: a listed action, or for open sets a reply built by the wrapper's sampler."""
        if self.actions is not None and mask is None and probability is None:
            return self.actions[int(self.np_random.integers(len(self.actions)))]
        if self.actions is None and self.sampler is not None:
            return self.sampler(self.np_random)
        return str(super().sample(mask=mask, probability=probability))

    def contains(self, x: Any) -> bool:
        return isinstance(x, str)

    def __repr__(self) -> str:
        if self.per_state:
            return "TextActions(per_state=True)"
        return f"TextActions(actions={self.actions!r})"

    def __eq__(self, other: Any) -> bool:
        return (
            isinstance(other, TextActions)
            and self.actions == other.actions
            and self.per_state == other.per_state
        )

    def __hash__(self) -> int:
        return hash(("TextActions", self.actions, self.per_state))


#: What to do when an env or a policy is given spaces that are not text (one message for both).
NOT_TEXT_HELP = (
    "gym_llm's PPO needs a text-in/text-out env: observations in a gymnasium.spaces.Text and "
    "replies in gym_llm.spaces.TextActions. Wrap it:\n"
    "    env = ActionParserWrapper(TextObservationWrapper(env))\n"
    "or build a vectorised one with gym_llm.make_text_env('ENV_ID', n_envs=8)."
)


def as_text_batch(observation: Any) -> tuple[list[str], bool]:
    """One observation string or a batch of them (list, ``dtype=object`` array, a vec env's
    observations) as a list of ``str`` (a :class:`TextWithActions` kept as it is), and whether
    it was a single string."""
    if isinstance(observation, str):
        return [observation], True
    flat = np.asarray(observation, dtype=object).ravel()
    return [o if isinstance(o, str) else str(o) for o in flat], False


# --- an env that describes itself ----------------------------------------------------------


@runtime_checkable
class DescribesItself(Protocol):
    """An env (checked on ``env.unwrapped``) that provides its own text, so that an env with
    numeric spaces (which SB3's ``MlpPolicy`` can also play) needs no arguments to the text
    wrappers: :class:`gym_llm.wrappers.TextObservationWrapper` takes ``describe`` as its
    formatter and ``instruction`` as the system prompt, :class:`gym_llm.wrappers.ActionParserWrapper`
    lists ``action_names`` as the valid replies. The check is structural (no base class);
    wrapper arguments still win.

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
