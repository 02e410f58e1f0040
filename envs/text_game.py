"""Text games that are not ``gymnasium.Env`` (TextArena, TextWorld, your own), as Gymnasium envs.

A game needs a ``reset`` that gives the first text and a ``step(text)`` that gives the next text,
a reward and whether it is over; nothing else. :class:`TextGameEnv` adapts one by naming its
methods, and normalises what ``step`` returns (``(text, reward, done)``, ``(..., info)``, or
Gymnasium's five values). Because many games state their rules and answer format only on the first
turn, the first observation is kept in front of every later one (``keep_first=True``), so a policy
that sees one observation at a time never loses them.

A game that judges a move invalid says so with ``info["action_valid"] = False`` (and
``info["parse_error"]``, its reason): the move is counted invalid as the parser's own verdicts are
(``info["invalid_actions"]``, ``total_invalid``). A game whose ``reset`` takes a seed gets one
every episode, drawn from the env's generator when the caller gives none, so every episode is a
fresh game and a seeded run replays. The ecosystems' one-call adapters (GEM, TextWorld-Express,
TextArena: :mod:`gym_llm.envs.ecosystems`) are built on it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, SupportsFloat

import gymnasium as gym

from gym_llm.spaces import DEFAULT_OBS_MAX_LENGTH, TextActions, TextObservations
from gym_llm.text import cut_middle

_FIRST = "{first}\n\n(That was the start of the game.) Now:\n{now}"


def _normalised_step(result: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
    """``(text, reward, terminated, truncated, info)`` from the shapes games return."""
    if not isinstance(result, tuple) or len(result) not in (3, 4, 5):
        raise TypeError(
            "A text game's step(text) must return (text, reward, done), (text, reward, done, "
            f"info) or (text, reward, terminated, truncated, info); got {result!r:.200}."
        )
    if len(result) == 5:
        text, reward, terminated, truncated, info = result
    else:
        text, reward, terminated = result[:3]
        truncated, info = False, (result[3] if len(result) == 4 else {})
    return str(text), float(reward), bool(terminated), bool(truncated), dict(info or {})


class TextGameEnv(gym.Env[str, str]):
    """A text game as a Gymnasium env with text observations and free-text actions.

    Args:
        game: the game object, or a factory that builds one (called at every reset, for games
            that keep state across episodes).
        reset: name of the method that starts an episode and returns the first text (or
            ``(text, info)``); it gets ``seed=`` if its signature takes one.
        step: name of the method that takes the reply text.
        instruction: the system prompt (rules that hold for every episode).
        keep_first: show the first observation (rules, answer format) before every later one.
        max_length: the longest observation text.

    >>> class Echo:
    ...     def reset(self): return "Say 'hi'."
    ...     def step(self, text): return "ok", float(text == "hi"), True
    >>> env = TextGameEnv(Echo())
    >>> env.reset()[0]
    "Say 'hi'."
    >>> env.step("hi")[1]
    1.0
    """

    def __init__(
        self,
        game: Any,
        *,
        reset: str = "reset",
        step: str = "step",
        instruction: str | None = None,
        keep_first: bool = True,
        max_length: int = DEFAULT_OBS_MAX_LENGTH,
    ) -> None:
        is_factory = isinstance(game, type) or (callable(game) and not hasattr(game, step))
        factory = game if is_factory else None
        probe = factory() if factory is not None else game
        for name in (reset, step):
            if not callable(getattr(probe, name, None)):
                raise TypeError(
                    f"{type(probe).__name__} has no method {name!r}; name the game's methods "
                    f"with TextGameEnv(game, reset='...', step='...')."
                )
        self._factory: Callable[[], Any] | None = factory
        self.game = probe
        self._reset_name, self._step_name = reset, step
        self.keep_first = keep_first
        self.max_length = max_length
        self.observation_space = TextObservations(max_length, instruction=instruction)
        self.action_space = TextActions(None)
        self._first: str | None = None
        self._conversation = False
        self.invalid_actions = 0
        #: Totals over the env's life, for logging invalid-action rates.
        self.total_steps = 0
        self.total_invalid = 0

    @property
    def conversation(self) -> bool:
        """Whether a conversation holds the episode (``ConversationWrapper`` sets it): then each
        observation is only what is new this turn (the first one is in the conversation
        already), and a game that repeats its rules, task or history (an adapter with a
        ``conversation`` attribute) is told to stop."""
        return self._conversation

    @conversation.setter
    def conversation(self, on: bool) -> None:
        self._conversation = bool(on)
        if on:
            self.keep_first = False
        self._tell_game()

    def _tell_game(self) -> None:
        """Pass :attr:`conversation` on to a game that has the attribute."""
        if hasattr(self.game, "conversation"):
            self.game.conversation = self._conversation

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        if self._factory is not None and self._first is not None:
            self.game = self._factory()  # a fresh game: no state from the last episode
            self._tell_game()
        method = getattr(self.game, self._reset_name)
        takes_seed = "seed" in inspect.signature(method).parameters
        if takes_seed and seed is None:  # a fresh game, replayable from the first seed
            seed = int(self.np_random.integers(2**31 - 1))
        result = method(seed=seed) if takes_seed else method()
        text, info = result if isinstance(result, tuple) else (result, {})
        self.invalid_actions = 0
        self._first = str(text)
        return self._fit(self._first, dict(info or {}))

    def step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        if self._first is None:
            raise RuntimeError("Call reset() before step().")
        result = getattr(self.game, self._step_name)(str(action))
        text, reward, terminated, truncated, info = _normalised_step(result)
        self._count(str(action), info)
        if self.keep_first:
            text = _FIRST.format(first=self._first, now=text)
        text, info = self._fit(text, info)
        return text, reward, terminated, truncated, info

    def _count(self, reply: str, info: dict[str, Any]) -> None:
        """The game's verdict on the move, in the keys the parser's verdicts use."""
        valid = info.get("action_valid", True) is not False
        self.total_steps += 1
        if not valid:
            self.invalid_actions += 1
            self.total_invalid += 1
        info.setdefault("action_text", reply)
        info["action_valid"] = valid
        info.setdefault("parse_error", None if valid else "the game rejected the move")
        info["invalid_actions"] = self.invalid_actions

    def close(self) -> None:
        """Close the game too, where it has a ``close`` (a game's server or process)."""
        close = getattr(self.game, "close", None)
        if callable(close):
            close()
        super().close()

    def _fit(self, text: str, info: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """Texts over ``max_length`` keep their head and tail (never a crash mid-episode)."""
        limit = self.max_length
        info["observation_truncated"] = len(text) > limit
        return cut_middle(text, limit), info
