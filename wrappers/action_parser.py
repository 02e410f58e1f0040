"""``ActionParserWrapper``: any Gymnasium env driven by text replies."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from gym_llm.spaces import DEFAULT_ACTION_MAX_LENGTH, TextActions, self_description
from gym_llm.wrappers import builtin_envs
from gym_llm.wrappers.formatters import format_array, format_number
from gym_llm.wrappers.parsing import ParseResult
from gym_llm.wrappers.resolver import ActionResolver, OnInvalid, ResolverSettings, rules_for

#: A custom parser: reply text -> env action (``None`` or an exception means "invalid").
Parser = Callable[[str], Any]

_NUMERIC = (spaces.Box, spaces.MultiDiscrete, spaces.MultiBinary)


def _describe_numeric(space: spaces.Space[Any]) -> str:
    if isinstance(space, spaces.Box):
        low, high = (
            np.broadcast_to(space.low, space.shape),
            np.broadcast_to(space.high, space.shape),
        )
        size = int(np.prod(space.shape)) if space.shape else 1
        if size == 1:
            return (
                f"What do you do? Answer with one number between {format_number(low.ravel()[0])} "
                f"and {format_number(high.ravel()[0])}."
            )
        return (
            f"What do you do? Answer with {size} numbers, low bounds {format_array(low.ravel())}, "
            f"high bounds {format_array(high.ravel())}."
        )
    if isinstance(space, spaces.MultiDiscrete):
        ranges = ", ".join(
            f"{format_number(s)}..{format_number(s + n - 1)}"
            for s, n in zip(space.start.ravel(), space.nvec.ravel(), strict=True)
        )
        return (
            f"What do you do? Answer with {space.nvec.size} whole numbers, in the ranges {ranges}."
        )
    assert isinstance(space, spaces.MultiBinary)
    return f"What do you do? Answer with {int(np.prod(space.shape))} numbers, each 0 or 1."


def discovered_action_names(env: gym.Env[Any, Any]) -> tuple[str, ...] | None:
    """Action names the env already exposes: an ``actions`` IntEnum on the unwrapped env
    (MiniGrid/BabyAI), then ALE's ``get_action_meanings()`` (lower-cased); ``None`` if neither."""
    unwrapped = env.unwrapped
    actions = getattr(unwrapped, "actions", None)
    if isinstance(actions, type) and issubclass(actions, enum.IntEnum):
        members = sorted(actions, key=int)
        if [int(m) for m in members] == list(range(len(members))):
            return tuple(m.name.replace("_", " ") for m in members)
    meanings = getattr(unwrapped, "get_action_meanings", None)
    if callable(meanings):
        try:
            return tuple(str(m).lower().replace("_", " ") for m in meanings())
        except Exception:  # an env whose method needs arguments or state: no names from it
            return None
    return None


def _aliases_for(
    env: gym.Env[Any, Any], names: Sequence[str] | None
) -> Mapping[str, Sequence[str]] | None:
    """Built-in synonyms for the env's actions, where the names are the built-in ones."""
    builtin = builtin_envs.lookup(env)
    if builtin is None or names is None or tuple(names) != builtin.action_names:
        return None
    return builtin.action_aliases


class ActionParserWrapper(
    gym.Wrapper[Any, str, Any, Any], gym.utils.RecordConstructorArgs, ResolverSettings
):
    """Accept text replies as actions: parse them into the wrapped env's actions.

    The action space becomes a :class:`gym_llm.spaces.TextActions`. For a Discrete env it lists
    the valid action strings in order: ``action_names`` if given, else the names the env exposes
    (an ``actions`` IntEnum as in MiniGrid/BabyAI, then ALE's ``get_action_meanings()``), else
    :class:`gym_llm.envs.DescribesItself`'s ``action_names``, else built-in names for Gymnasium's
    toy-text and classic-control envs, else the action numbers. ``action_aliases``
    (``{"stick": ["stand", "stay"]}``) adds words that mean an action (built-in ones for
    Blackjack and Taxi). Box, MultiDiscrete and MultiBinary envs take numbers the reply states
    (a reply of numbers only, JSON, or ``Action: ...``); ``any_numbers=True`` also takes the last
    numbers anywhere in it. Parsing rules: :mod:`gym_llm.wrappers.parsing`. ``parser`` (a
    callable ``text -> env action``) replaces the built-in rules; one that raises or returns
    something outside the space counts as invalid. ``max_length`` is the reply length the action
    space allows (the parser reads any length).

    An env that judges a move invalid itself (``info["action_valid"] = False``, with its reason in
    ``info["parse_error"]``) has it counted as an invalid action too, with the same penalty.

    An unparseable reply is never silent. With ``on_invalid="fallback"`` the env gets
    ``fallback_action`` (or a random valid action, seeded by ``reset(seed=...)``) and the reward
    gets ``invalid_penalty`` added; with ``"raise"`` a ``ValueError`` names the reply and the valid
    actions. Every ``info`` carries ``action_text``, ``action`` (what the env got),
    ``action_valid``, ``parse_error``, ``parse_method``, ``action_clipped`` and
    ``invalid_actions`` (count so far this episode).

    >>> import gymnasium as gym
    >>> env = ActionParserWrapper(gym.make("Blackjack-v1", sab=False))
    >>> env.action_space.actions
    ('stick', 'hit')
    >>> _ = env.reset(seed=0)
    >>> _, _, _, _, info = env.step('{"action": "stick"}')
    >>> info["action"], info["action_valid"]
    (0, True)
    """

    def __init__(
        self,
        env: gym.Env[Any, Any],
        *,
        action_names: Sequence[str] | None = None,
        parser: Parser | None = None,
        on_invalid: OnInvalid = "fallback",
        fallback_action: Any = None,
        invalid_penalty: float = 0.0,
        max_length: int = DEFAULT_ACTION_MAX_LENGTH,
        action_aliases: Mapping[str, Sequence[str]] | None = None,
        any_numbers: bool = False,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self,
            action_names=action_names,
            parser=parser,
            on_invalid=on_invalid,
            fallback_action=fallback_action,
            invalid_penalty=invalid_penalty,
            max_length=max_length,
            action_aliases=action_aliases,
            any_numbers=any_numbers,
        )
        gym.Wrapper.__init__(self, env)
        inner = env.action_space
        names = None
        if isinstance(inner, spaces.Discrete):
            names = self._names_for(env, inner, action_names)
            self.action_space = TextActions(
                names,
                max_length=max_length,
                description="What do you do? Answer with one of: "
                + ", ".join(f"'{n}'" for n in names)
                + ".",
            )
        elif action_names is not None:
            raise ValueError(
                f"action_names only applies to Discrete action spaces; this env has {inner!r}."
            )
        elif isinstance(inner, _NUMERIC):
            self.action_space = TextActions(
                None,
                max_length=max_length,
                sampler=self._sample_numeric,
                description=_describe_numeric(inner),
            )
        elif isinstance(inner, TextActions) and parser is None:
            # A text env's own actions (a list, or each state's): kept, so a parser wrapped on
            # to add an invalid_penalty to the env's own verdicts hides nothing.
            self.action_space = inner
        elif isinstance(inner, spaces.Text) or parser is not None:
            self.action_space = TextActions(None, max_length=max_length)
        else:
            raise TypeError(
                f"ActionParserWrapper cannot parse text into {inner!r} by itself. Pass "
                "parser=callable(text) -> action."
            )
        #: Reply -> action under the invalid-action policy (shared with ``Agent``).
        self.resolver = ActionResolver(
            inner,
            rules=rules_for(
                inner,
                names,
                aliases=action_aliases if action_aliases is not None else _aliases_for(env, names),
                any_numbers=any_numbers,
            ),
            extractor=parser,
            extractor_name="parser",
            on_invalid=on_invalid,
            fallback_action=fallback_action,
            invalid_penalty=invalid_penalty,
            advice=self.action_space.description or "",
        )
        self.invalid_actions = 0
        #: Totals over the wrapper's life, for logging invalid-action rates.
        self.total_steps = 0
        self.total_invalid = 0

    @staticmethod
    def _names_for(
        env: gym.Env[Any, Any], space: spaces.Discrete, action_names: Sequence[str] | None
    ) -> tuple[str, ...]:
        n = int(space.n)
        if action_names is not None:
            names = tuple(str(a) for a in action_names)
            if len(names) != n:
                raise ValueError(
                    f"action_names has {len(names)} names but the env has {n} actions: {names!r}."
                )
            return names
        discovered = discovered_action_names(env)
        if discovered is not None and len(discovered) == n:
            return discovered
        described = self_description(env)
        if described is not None:
            names = tuple(str(a) for a in described.action_names)
            if len(names) != n:
                raise ValueError(
                    f"{type(env.unwrapped).__name__}.action_names has {len(names)} names but "
                    f"its action space has {n} actions: {names!r}."
                )
            return names
        builtin = builtin_envs.lookup(env)
        if builtin is not None and builtin.action_names is not None:
            return builtin.action_names
        return tuple(str(int(space.start) + i) for i in range(n))

    def _sample_numeric(self, rng: np.random.Generator) -> str:
        del rng  # the inner space's own generator keeps sampling reproducible per seed
        return format_array(np.asarray(self.resolver.sample()), precision=6)

    def parse(self, text: str) -> ParseResult:
        """Parse one reply; never raises on a string (custom parser errors become invalid)."""
        return self.resolver.parse(text)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if seed is not None:
            self.resolver.seed(seed)
        self.invalid_actions = 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action: str) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        if not isinstance(action, str):
            raise TypeError(
                f"ActionParserWrapper.step takes the model's reply as str, got "
                f"{type(action).__name__} {action!r}. To step with env actions, use the inner env."
            )
        resolution = self.resolver.resolve(action)
        result = resolution.parsed
        obs, reward, terminated, truncated, info = self.env.step(resolution.action)
        info = dict(info)
        if result.valid and info.get("action_valid", True) is False:
            # The env's own verdict (e.g. an illegal move in a game): counted the same way.
            reason = info.get("parse_error") or "the env rejected the move"
            result = ParseResult(None, error=str(reason), method=result.method)
        self.total_steps += 1
        if not result.valid:
            self.invalid_actions += 1
            self.total_invalid += 1
            reward = float(reward) + self.resolver.invalid_penalty
        info.update(result.info(action, self.invalid_actions), action=resolution.action)
        return obs, reward, terminated, truncated, info
