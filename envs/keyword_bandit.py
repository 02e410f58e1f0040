"""``KeywordBandit``: the smallest text-native env, a sanity check for text RL pipelines.

Each episode is one step: the observation lists a few words and names one of them as the target;
replying with the target earns 1, anything else 0. A model that reads its prompt solves it at
once, so a training run that does not reach :attr:`KeywordBanditEnv.optimal_return` quickly points
at the pipeline (prompting, parsing, credit assignment), not at the task.

The env speaks text on both sides (:class:`gym_llm.spaces.TextObservations` in,
:class:`gym_llm.spaces.TextActions` out), so it needs no wrappers; replies are parsed with the same
:class:`gym_llm.wrappers.parsing.DiscreteParser` rules as
:class:`gym_llm.wrappers.ActionParserWrapper`, and ``info`` carries the same keys.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from gym_llm.spaces import TextActions, TextObservations
from gym_llm.wrappers.parsing import DiscreteParser

DEFAULT_OPTIONS: tuple[str, ...] = ("apple", "banana", "cherry", "grape")

#: One lowercase ASCII word: no spaces or punctuation, so that the parser's whole-word matching and
#: the observation's comma-separated list can never be ambiguous.
_WORD = re.compile(r"[a-z]+")

INSTRUCTION = (
    "Several words are listed as options, and one of them is named as the target. "
    "Reply with the target word. Reward 1 for the target, 0 otherwise."
)


def _validated_options(options: Sequence[str]) -> tuple[str, ...]:
    """The options as a tuple, or a ``ValueError`` saying what is wrong with them."""
    if isinstance(options, str):
        raise ValueError(
            f"options must be a sequence of words, not one string: got {options!r}; "
            f"did you mean ({options!r}, ...)?"
        )
    words = tuple(options)
    if len(words) < 2:
        raise ValueError(f"options needs at least 2 words to choose from, got {words!r}.")
    bad = [w for w in words if not isinstance(w, str) or not _WORD.fullmatch(w)]
    if bad:
        raise ValueError(
            f"options must be single lowercase words (letters a-z only), got {bad!r} in {words!r}."
        )
    if len(set(words)) != len(words):
        duplicates = sorted({w for w in words if words.count(w) > 1})
        raise ValueError(f"options must be distinct, got {duplicates!r} more than once.")
    return words


class KeywordBanditEnv(gym.Env[str, str]):
    """One-step text env: reply with the target word named in the observation.

    At ``reset`` a target is drawn uniformly from ``options`` with ``self.np_random`` (so
    ``reset(seed=...)`` makes episodes reproducible) and the observation reads
    ``"Options: apple, banana, cherry, grape. Target: cherry."``. ``step(reply)`` parses the reply
    with :class:`~gym_llm.wrappers.parsing.DiscreteParser` (exact word, ``{"action": ...}``,
    ``Answer: X``, else the last option mentioned; an option's index also counts) and ends the
    episode with reward 1.0 if the parsed option is the target, else 0.0. An unparseable reply is
    an invalid action: reward 0, ``info["action_valid"]`` False, counted in
    ``info["invalid_actions"]``.

    ``info`` after ``step`` has the keys of :class:`gym_llm.wrappers.ActionParserWrapper`'s
    (``action_text``, ``action`` — the option's index or ``None`` —, ``action_valid``,
    ``parse_error``, ``parse_method``, ``action_clipped``, ``invalid_actions``), so logging code
    works the same for wrapped and text-native envs, plus ``target``.

    Args:
        options: The words to choose from: at least 2, distinct, each one lowercase word.
        render_mode: ``None`` or ``"ansi"`` (``render()`` returns the observation and, after a
            step, the reply and reward).
    """

    # gym.Env declares ``metadata`` as an instance attribute, so mypy rejects ClassVar here.
    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 4}  # noqa: RUF012

    #: The best expected episode return: always answering the target. Benchmarks and tests compare
    #: a trained policy's mean return against this and :attr:`random_return`.
    optimal_return: float = 1.0
    #: The expected episode return of picking an option uniformly at random (what
    #: ``action_space.sample()`` does): ``1 / len(options)``. The class-level value is for the
    #: default four options; each instance sets its own. Learning means beating this.
    random_return: float = 1.0 / len(DEFAULT_OPTIONS)

    def __init__(
        self, options: Sequence[str] = DEFAULT_OPTIONS, render_mode: str | None = None
    ) -> None:
        self.options: tuple[str, ...] = _validated_options(options)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode must be None or one of {self.metadata['render_modes']}, "
                f"got {render_mode!r}."
            )
        self.render_mode = render_mode
        self.random_return = 1.0 / len(self.options)
        self._parser = DiscreteParser(self.options)
        # Exactly the longest observation text, so the space contains every observation we emit.
        longest = max(len(self._text(target)) for target in self.options)
        self.observation_space = TextObservations(max_length=longest, instruction=INSTRUCTION)
        self.action_space = TextActions(
            self.options,
            description="Answer with one of: " + ", ".join(f"'{w}'" for w in self.options) + ".",
        )
        self._target: str | None = None
        self._done = True
        self._render_text: str | None = None

    def _text(self, target: str) -> str:
        return f"Options: {', '.join(self.options)}. Target: {target}."

    def observation_for(self, target: str) -> str:
        """The observation of an episode whose target is ``target`` (for exact evaluation: each
        target is equally likely, so asking once per target gives the exact expected return)."""
        if target not in self.options:
            raise ValueError(f"target must be one of {list(self.options)}, got {target!r}.")
        return self._text(target)

    def score(self, reply: str, target: str) -> float:
        """The reward ``reply`` earns when the target is ``target`` (what ``step`` pays)."""
        result = self._parser(reply)
        return 1.0 if result.valid and self.options[result.action] == target else 0.0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Draw a new target. ``options`` is accepted for the Gymnasium API and ignored."""
        super().reset(seed=seed)
        self._target = self.options[int(self.np_random.integers(len(self.options)))]
        self._done = False
        observation = self._text(self._target)
        self._render_text = observation
        return observation, {"target": self._target}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Score one reply and end the episode.

        Raises:
            TypeError: ``action`` is not a ``str``: this env takes the model's reply, not an index.
            RuntimeError: no episode is running (``reset`` not called, or the step already made).
        """
        if not isinstance(action, str):
            raise TypeError(
                f"KeywordBanditEnv.step takes the model's reply as str, got "
                f"{type(action).__name__} {action!r}. Reply with one of {list(self.options)}."
            )
        if self._done or self._target is None:
            raise RuntimeError(
                "KeywordBanditEnv episodes last one step: call reset() before step()."
            )
        result = self._parser(action)
        chosen = self.options[result.action] if result.valid else None
        reward = self.score(action, self._target)
        self._done = True
        observation = self._text(self._target)
        self._render_text = f"{observation}\nReply: {action!r} -> {chosen}, reward {reward:g}."
        info: dict[str, Any] = {"target": self._target, **result.info(action)}
        return observation, reward, True, False, info

    def render(self) -> str | None:
        """The current text (``"ansi"`` mode); ``None`` with a warning when no mode was set."""
        if self.render_mode is None:
            gym.logger.warn(
                "KeywordBanditEnv.render() called without a render_mode; pass render_mode='ansi'."
            )
            return None
        return self._render_text
