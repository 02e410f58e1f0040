"""``TextObservationWrapper``: any Gymnasium env's observations as readable text."""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Literal, SupportsFloat

import gymnasium as gym
from gymnasium import spaces

from gym_llm.spaces import DEFAULT_OBS_MAX_LENGTH, TEXT_CHARSET, TextObservations, self_description
from gym_llm.text import CUT_MARK, cut_middle
from gym_llm.wrappers import builtin_envs
from gym_llm.wrappers.formatters import check_supported, format_number, format_observation

#: A user formatter: ``obs -> str`` or ``(obs, info) -> str``.
Formatter = Callable[..., str]


def _accepts_info(formatter: Formatter) -> bool:
    """Whether ``formatter`` takes a second positional argument (the ``info`` dict)."""
    try:
        params = list(inspect.signature(formatter).parameters.values())
    except (TypeError, ValueError):  # builtins without a signature: assume obs only
        return False
    positional = [
        p
        for p in params
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    ]
    return len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in positional)


def generic_instruction(env: gym.Env[Any, Any]) -> str:
    """The instruction used when neither the caller nor the built-in tables provide one."""
    name = env.spec.id if env.spec is not None else type(env.unwrapped).__name__
    return (
        f"You are an agent acting in the environment {name}. Each turn you see the current "
        "observation and reply with one action. Goal: the highest total reward."
    )


class TextObservationWrapper(gym.Wrapper[str, Any, Any, Any], gym.utils.RecordConstructorArgs):
    """Turn any env's observations into text, for a language-model policy.

    The formatter is, in order of preference: ``formatter`` if given, the env's own ``describe``
    if it implements :class:`gym_llm.envs.DescribesItself` (which also supplies the default
    ``instruction`` and the action names shown in ``history``), the built-in one for
    Gymnasium's toy-text and classic-control envs, else a generic formatter that handles Discrete,
    MultiDiscrete, MultiBinary, Box, Tuple, Dict and Text spaces, nested. The observation space
    becomes a :class:`gym_llm.spaces.TextObservations` (a ``gymnasium.spaces.Text``) that carries
    the task ``instruction`` for the policy's system prompt.

    Args:
        env: the env to wrap.
        formatter: ``obs -> str`` or ``(obs, info) -> str``; overrides the built-in formatter.
        instruction: the task description shown to the model; defaults to the built-in one
            (rules, goal, what a good outcome is) or a generic sentence.
        history: include the last ``history`` (observation, action, reward) steps in the text.
        feature_names: names for the elements of a 1-D Box/MultiDiscrete/MultiBinary observation,
            used by the generic formatter (``"x: 0.1"`` instead of ``"[0.1, ...]"``).
        precision: significant digits for floats in the generic formatter.
        max_length: the longest text the observation space admits.
        on_long: what happens to a text over ``max_length`` (a game echoing long replies back,
            a long history): ``"truncate"`` (default) keeps its head (rules, goal) and its tail
            (the latest state) with a ``[... N characters cut ...]`` mark in between, and counts
            it (``info["observation_truncated"]``, :attr:`truncated_observations`); ``"raise"``
            raises ``ValueError``.
        charset: extra characters the observation space must admit (for custom formatters).

    >>> import gymnasium as gym
    >>> env = TextObservationWrapper(gym.make("Blackjack-v1", sab=False))
    >>> text, info = env.reset(seed=0)
    >>> text.startswith("Your hand totals")
    True
    """

    def __init__(
        self,
        env: gym.Env[Any, Any],
        *,
        formatter: Formatter | None = None,
        instruction: str | None = None,
        history: int = 0,
        feature_names: Sequence[str] | None = None,
        precision: int = 3,
        max_length: int = DEFAULT_OBS_MAX_LENGTH,
        charset: str = "",
        on_long: Literal["truncate", "raise"] = "truncate",
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self,
            formatter=formatter,
            instruction=instruction,
            history=history,
            feature_names=feature_names,
            precision=precision,
            max_length=max_length,
            charset=charset,
            on_long=on_long,
        )
        gym.Wrapper.__init__(self, env)
        if on_long not in ("truncate", "raise"):
            raise ValueError(f"on_long must be 'truncate' or 'raise', got {on_long!r}.")
        if max_length < 2 * len(CUT_MARK) + 40:
            raise ValueError(f"max_length={max_length} is too short to hold an observation.")
        self.on_long = on_long
        #: Observations cut to ``max_length`` so far (over the wrapper's life).
        self.truncated_observations = 0
        self._cut_now = False
        if history < 0:
            raise ValueError(
                f"history must be >= 0 (the number of past steps shown), got {history}."
            )
        builtin = builtin_envs.lookup(env) if formatter is None else None
        described = self_description(env)
        self._format: Callable[[Any, dict[str, Any]], str]
        if formatter is None and described is not None:
            describe = described.describe
            self._format = lambda o, i: describe(o)
        elif formatter is not None:
            if not callable(formatter):
                raise TypeError(f"formatter must be a callable obs -> str, got {formatter!r}.")
            user = formatter
            self._format = (
                (lambda o, i: user(o, i)) if _accepts_info(user) else (lambda o, i: user(o))
            )
        elif builtin is not None:
            self._format = builtin.formatter(env)
        else:
            check_supported(env.observation_space)
            space, names = env.observation_space, feature_names
            self._format = lambda o, i: format_observation(
                space, o, names=names, precision=precision
            )

        if instruction is None and described is not None:
            instruction = described.instruction
        if instruction is None:
            instruction = (
                builtin.instruction(env) if builtin is not None else generic_instruction(env)
            )
        self.instruction: str = instruction
        self.history = history
        self._action_names = (
            tuple(described.action_names)
            if described is not None
            else builtin.action_names
            if builtin is not None
            else None
        )
        chars = set(TEXT_CHARSET) | set(charset)
        if isinstance(env.observation_space, spaces.Text):
            chars |= set(env.observation_space.character_set)
        self.observation_space = TextObservations(
            max_length, charset=frozenset(chars), instruction=instruction
        )
        self._past: deque[tuple[str, str, float]] = deque(maxlen=max(history, 1))
        self._current = ""

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._past.clear()
        self._cut_now = False
        self._current = self._checked(self._format(obs, info))
        text = self._with_history()
        return text, self._counted(info)

    def step(self, action: Any) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self.history:
            self._past.append((self._current, self.describe_action(action), float(reward)))
        self._cut_now = False
        self._current = self._checked(self._format(obs, info))
        text = self._with_history()
        return text, reward, terminated, truncated, self._counted(info)

    def _counted(self, info: dict[str, Any]) -> dict[str, Any]:
        self.truncated_observations += int(self._cut_now)
        return {**info, "observation_truncated": self._cut_now}

    def format(self, observation: Any, info: dict[str, Any] | None = None) -> str:
        """The text of one raw observation, without history.

        Lets a caller ask the policy about any state without playing to it (exact evaluation
        queries every state of a tabular env this way).
        """
        return self._checked(self._format(observation, info or {}))

    def describe_action(self, action: Any) -> str:
        """An env action as text: its built-in name where known, else the number(s)."""
        space = self.env.action_space
        if self._action_names is not None and isinstance(space, spaces.Discrete):
            return self._action_names[int(action) - int(space.start)]
        return format_observation(space, action) if isinstance(space, spaces.Space) else str(action)

    def _with_history(self) -> str:
        if not self.history or not self._past:
            return self._current
        lines = ["Previous steps (oldest first):"]
        for n, (text, action, reward) in enumerate(self._past, start=1):
            lines.append(f"Step -{len(self._past) - n + 1}:")
            lines.extend("  " + line for line in text.splitlines())
            lines.append(f"  You chose: {action}. Reward: {format_number(reward)}.")
        lines.append("Now:")
        lines.append(self._current)
        return self._checked("\n".join(lines))

    def _checked(self, text: Any) -> str:
        if not isinstance(text, str):
            raise TypeError(f"The observation formatter returned {type(text).__name__}, not str.")
        space = self.observation_space
        assert isinstance(space, TextObservations)
        if len(text) > space.max_length:
            if self.on_long == "raise":
                raise ValueError(
                    f"Observation text has {len(text)} characters, more than max_length="
                    f"{space.max_length}. Pass a larger max_length= to TextObservationWrapper "
                    "(or a smaller history=), or on_long='truncate'."
                )
            text = cut_middle(text, int(space.max_length))
            self._cut_now = True
        bad = sorted(set(text) - space.character_set)
        if bad:
            raise ValueError(
                f"Observation text contains characters outside the observation space: {bad!r}. "
                f"Pass charset={''.join(bad)!r} to TextObservationWrapper."
            )
        return str(text)
