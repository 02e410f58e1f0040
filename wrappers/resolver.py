"""Reply -> env action under a declared invalid-action policy: the one resolver that
:class:`gym_llm.wrappers.ActionParserWrapper` and :class:`gym_llm.Agent` both use, so a reply means
the same action, and an invalid one is handled and counted the same way, in both."""

from __future__ import annotations

import copy
import random
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from gymnasium import spaces

from gym_llm.wrappers.parsing import DiscreteParser, NumericParser, ParseResult

#: The invalid-action policies: step with a fallback action (counted, penalised) or raise.
OnInvalid = Literal["fallback", "raise"]

#: Without an action space, at most this many distinct valid actions are kept as fallbacks.
MAX_REMEMBERED_ACTIONS = 1000

#: A caller's own reply -> action function (``None`` or an exception means "no valid action").
Extractor = Callable[[str], Any]


class InvalidActionError(ValueError):
    """A reply named no valid action under ``on_invalid="raise"`` (the declared policy)."""


@dataclass(frozen=True)
class Resolution:
    """What :class:`ActionResolver` made of a reply: the action the env gets and its origin."""

    #: The env action (the fallback when the reply gave no valid one).
    action: Any
    #: ``"<extractor name>"``, ``"parser:<rule>"``, ``"text"`` or ``"fallback"``.
    source: str
    #: Why the first stage (the extractor, else the rules) gave no valid action.
    error: str | None = None
    #: Reward added for this reply (``invalid_penalty`` for a fallback, else 0).
    penalty: float = 0.0
    #: The parse that decided (for ``info``); its action is ``None`` for a fallback.
    parsed: ParseResult = field(default_factory=lambda: ParseResult(None))

    @property
    def valid(self) -> bool:
        return self.source != "fallback"


def rules_for(
    space: spaces.Space[Any] | None,
    names: Sequence[str] | None = None,
    *,
    aliases: Mapping[str, Sequence[str]] | None = None,
    any_numbers: bool = False,
) -> Extractor | None:
    """The built-in rules for ``space`` (``names``: a Discrete space's action names, else its
    numbers; ``aliases``: other words for them), or ``None`` where there are none (Text and
    composite spaces). ``any_numbers``: numeric spaces also take the last numbers anywhere in a
    reply (off: the reply must state them)."""
    if isinstance(space, spaces.Discrete):
        names = tuple(names) if names else tuple(str(int(space.start) + i) for i in range(space.n))
        if len(names) != int(space.n):
            raise ValueError(
                f"action_names has {len(names)} names but the action space {space} has "
                f"{space.n} actions: {names!r}."
            )
        return DiscreteParser(names, start=int(space.start), aliases=aliases)
    if names is not None:
        raise ValueError(f"action_names only applies to Discrete action spaces, got {space!r}.")
    if isinstance(space, spaces.Box | spaces.MultiDiscrete | spaces.MultiBinary):
        return NumericParser(space, any_numbers=any_numbers)
    return None


#: Tells a random-action sampler's stream apart from the env's, which ``reset(seed)`` seeds alike.
SAMPLER_STREAM = 0xFA11BAC


def action_sampler_seed(seed: int) -> int:
    """The seed of a random-action sampler (a fallback, an exploration's uniform draws) for an
    env reset with ``seed``: reproducible, and independent of the generator the env seeds from
    the same number. Gymnasium seeds an env and a space alike (``PCG64(SeedSequence(seed))``),
    so a ``Discrete(n)`` space seeded with the env's own seed draws the numbers the env draws.

    >>> action_sampler_seed(0) == action_sampler_seed(0) != 0
    True
    """
    return int(np.random.SeedSequence([int(seed), SAMPLER_STREAM]).generate_state(1)[0])


class ActionResolver:
    """Reply -> env action, the one place both :class:`ActionParserWrapper` and ``Agent`` decide it.

    Stages: the ``extractor`` (a custom parser, ``Agent.extract_action``) if given, else the
    built-in ``rules`` (or, on a Text action space, the reply itself); then, with ``recover``, the
    rules after a failed extractor; then the declared invalid-action policy: ``"raise"`` (a
    ``ValueError`` as soon as the first stage fails) or ``"fallback"`` (``fallback_action``, else
    a random action of ``space`` seeded by :meth:`seed`, else, with no space, a random one of
    the valid actions seen so far, warned once; always with ``invalid_penalty``). Only an
    invalid reply before any valid one, with no space and no ``fallback_action``, raises.
    """

    def __init__(
        self,
        space: spaces.Space[Any] | None,
        *,
        rules: Extractor | None = None,
        extractor: Extractor | None = None,
        extractor_name: str = "custom",
        recover: bool = False,
        on_invalid: str = "fallback",
        fallback_action: Any = None,
        invalid_penalty: float = 0.0,
        advice: str = "",
    ) -> None:
        if on_invalid not in ("fallback", "raise"):
            raise ValueError(f"on_invalid must be 'fallback' or 'raise', got {on_invalid!r}.")
        self.space = space
        self.rules = rules
        self.extractor = extractor
        self.extractor_name = extractor_name
        self.recover = recover
        self.on_invalid = on_invalid
        self.invalid_penalty = float(invalid_penalty)
        #: Appended to the ``"raise"`` policy's error (e.g. the valid actions).
        self.advice = advice
        self._sampler = copy.deepcopy(space)
        #: Without a space: the distinct valid actions so far (the fallback draws among them).
        self._seen: list[Any] = []
        self._seen_rng = random.Random(0)
        self._warned = False
        self.fallback_action = self._validated_fallback(fallback_action)

    def seed(self, seed: int | None) -> None:
        """Seed the random fallback (a copy of the space: the env's own generator is untouched)
        from a stream of its own: seeded with the env's seed itself, a ``Discrete`` space draws
        the very numbers the env's ``reset`` draws, and a random guess would find
        ``GuessNumber``'s secret every time, which taught a policy to reply nonsense."""
        own = None if seed is None else action_sampler_seed(seed)
        if self._sampler is not None:
            self._sampler.seed(own)
        self._seen_rng.seed(own)

    def sample(self) -> Any:
        """A random action of the space, from the resolver's own seeded copy of it."""
        if self._sampler is None:
            raise ValueError("No action space to sample a fallback action from.")
        return self._sampler.sample()

    def contains(self, action: Any) -> bool:
        """Whether ``action`` is in the space (no space: anything but ``None``); never raises."""
        if action is None or self.space is None:
            return action is not None
        try:
            return bool(self.space.contains(action))
        except Exception:  # e.g. a str for a Box: not an action, not a crash
            return False

    def _extract(self, reply: str) -> ParseResult:
        assert self.extractor is not None
        name = self.extractor_name
        try:
            action = self.extractor(reply)
        except Exception as exc:  # a user's extractor failing is an invalid action, not a crash
            return ParseResult(None, error=f"{name} raised {type(exc).__name__}: {exc}")
        if action is None:
            return ParseResult(None, error=f"{name} returned None")
        if not self.contains(action):
            return ParseResult(None, error=f"{name} returned {action!r}, not in {self.space}")
        return ParseResult(action, method=name)

    def _first(self, reply: str) -> ParseResult:
        if self.extractor is not None:
            return self._extract(reply)
        if self.rules is not None:
            return self.rules(reply)  # type: ignore[no-any-return]
        if isinstance(self.space, spaces.Text):
            return ParseResult(reply, method="text")  # a Text-action env takes the reply as is
        return ParseResult(None, error="no parser for this action space")

    def parse(self, reply: str) -> ParseResult:
        """The reply's action by the stages, without the invalid-action policy; never raises."""
        first = self._first(reply)
        if first.valid or not (self.recover and self.extractor and self.rules):
            return first
        recovered = self.rules(reply)
        if recovered.valid:
            return ParseResult(recovered.action, first.error, f"parser:{recovered.method}")
        return first

    def resolve(self, reply: str) -> Resolution:
        """The env action for ``reply`` under the invalid-action policy (see the class)."""
        parsed = self.parse(reply)
        error = parsed.error
        if parsed.valid:
            source = parsed.method or "parser"
            if self.extractor is None and source != "text":
                source = f"parser:{source}"
            self._remember(parsed.action)
            return Resolution(parsed.action, source, error, 0.0, parsed)
        if self.on_invalid == "raise":
            raise InvalidActionError(
                f"Invalid action for reply {reply!r}: {error}. {self.advice}".strip()
            )
        if self.fallback_action is not None:
            fallback = self.fallback_action
        elif self._sampler is not None:
            fallback = self.sample()
        elif self._seen:
            fallback = self._seen[self._seen_rng.randrange(len(self._seen))]
            if not self._warned:
                self._warned = True
                warnings.warn(
                    f"Invalid action for reply {reply!r} ({error}); with no action space the "
                    f"fallback is a random one of the {len(self._seen)} actions seen valid so "
                    f"far, with invalid_penalty={self.invalid_penalty} (counted; warned once). "
                    "Pass action_space=env.action_space for a uniform fallback over all "
                    "actions, fallback_action=... for a fixed one, or on_invalid='raise' to "
                    "stop instead.",
                    RuntimeWarning,
                    stacklevel=3,
                )
        else:
            raise ValueError(
                f"Invalid action for reply {reply!r} ({error}) before any valid one, and nothing "
                "to fall back to: pass action_space=env.action_space (random fallback) or "
                "fallback_action=..."
            )
        return Resolution(fallback, "fallback", error, self.invalid_penalty, parsed)

    def _remember(self, action: Any) -> None:
        """Keep a valid action as a fallback candidate when there is no space to sample."""
        if self.space is not None or len(self._seen) >= MAX_REMEMBERED_ACTIONS:
            return
        try:
            known = any(bool(action == seen) for seen in self._seen)
        except Exception:  # arrays of other shapes etc.: not the same action
            known = False
        if not known:
            self._seen.append(action)

    def _validated_fallback(self, fallback: Any) -> Any:
        if fallback is None or self.space is None:
            return fallback
        if isinstance(fallback, str) and (self.rules is not None or self.extractor is not None):
            parsed = self.rules(fallback) if self.rules is not None else self._extract(fallback)
            if not parsed.valid:
                raise ValueError(f"fallback_action {fallback!r} is not valid: {parsed.error}.")
            return parsed.action
        if not self.contains(fallback):
            raise ValueError(
                f"fallback_action {fallback!r} is not in the action space {self.space}."
            )
        return fallback


class ResolverSettings:
    """The invalid-action settings of an owner of an :class:`ActionResolver`
    (``ActionParserWrapper``, ``Agent``), read from the resolver so they are held once."""

    resolver: ActionResolver

    @property
    def on_invalid(self) -> OnInvalid:
        """The invalid-action policy (held by :attr:`resolver`)."""
        return self.resolver.on_invalid  # type: ignore[return-value]

    @property
    def invalid_penalty(self) -> float:
        return self.resolver.invalid_penalty

    @property
    def fallback_action(self) -> Any:
        """The validated fallback (``None``: a random action)."""
        return self.resolver.fallback_action
