"""Robust reply → env action parsing, the part of an LLM agent that must never crash.

Rules for a Discrete action set with names (first rule that yields a verdict wins):

1. **exact**: the whole reply, trimmed of whitespace, quotes, backticks, ``*`` and a final period,
   is an action name (case-insensitive) or an action number.
2. **json**: JSON objects in the reply (fenced ```json blocks or any ``{...}``) with an
   ``"action"`` key. Every stated action must be valid and all must agree: an invalid value, a
   duplicate ``"action"`` key with another value, or two objects stating different actions make
   the reply invalid (no guessing from the prose).
3. **pattern**: the last ``Action: X`` statement (also ``Answer:``, ``Choice:``, ``Move:``,
   ``Decision:``, with ``:`` or ``=``, optionally ``... is X``; a statement ends at the next
   statement, ``;`` or a new line, so the last one wins even on one line) where X starts with a
   name or a number standing alone. A statement that goes on to name another action
   (``Action: left or right``) makes the reply invalid.
4. **mention**: action names in free text, read clause by clause
   (:mod:`gym_llm.wrappers.decision`): the last clause that plainly names an action decides;
   questions, conditions, negations and idioms decide nothing; a deciding clause that names two
   actions, or an action ruled out later, makes the reply invalid.

Numbers mean env action values (``start + index``; for almost all envs simply the index), except
when every action name is itself a number (``GuessNumber``'s ``"1"`` … ``"16"``): then a number
means the action of that name, so ``3``, ``"3"`` and ``{"action": 3}`` all pick the action named
``"3"``. Outside JSON and exact replies a number counts only when it stands alone: ``Move 2 steps
down`` is a move down, ``Answer: 0 risk`` is no answer. Struck-through text (``~~hit~~``) is not
read.

For numeric action spaces (Box, MultiDiscrete, MultiBinary) with ``n`` elements: a JSON
``{"action": [...]}`` or a JSON list, then the numbers of the last ``Action: ...`` statement, then
the **last n numbers** in the reply. Box values are clipped to the bounds (reported as clipped);
MultiDiscrete/MultiBinary values outside the space, non-integers, NaN or too few numbers are invalid.

Names and replies are compared folded (:func:`gym_llm.text.fold`): case, full-width letters,
look-alikes such as ``ı``, ``İ`` and ``ſ``, zero-width characters and soft hyphens make no
difference, so ``fırst`` is ``first`` and ``ＨＩＴ`` is ``hit``.

No parser here ever raises on a string: failures come back as a :class:`ParseResult` with an error.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

from gym_llm.text import fold
from gym_llm.wrappers.decision import (
    Mention,
    decide,
    is_condition,
    negated_before,
    number_stands_alone,
    without_struck,
)
from gym_llm.wrappers.json_replies import json_action, json_actions, json_objects, without_json

_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_KEYWORD = r"\b(?:final\s+)?(?:action|answer|choice|move|decision)"
#: A statement's head (``Action:``, ``My answer is``), so that every statement on a line is found.
_HEAD = _KEYWORD + r"\s*(?:is\s*)?[:=]?\s*(?:is\s+)?[\"'`*\[\(]*"
#: The parsers match folded text (:func:`gym_llm.text.fold`: lower case, look-alikes made ASCII),
#: so no pattern needs ``re.IGNORECASE``, which matches ``ı``, ``ſ`` and ``K`` against ASCII.
_STATEMENT_HEAD = re.compile(_HEAD)
#: A statement with the rest of its line (numeric spaces read its numbers).
_STATEMENT = re.compile(_HEAD + r"(?P<value>[^\n]*)")
#: Where a Discrete statement's value ends: the next statement, a ``;`` or a new line.
_STATEMENT_END = re.compile(r"[;\n]|" + _KEYWORD + r"\b")
_ONLY_NUMBERS = re.compile(
    r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?:[\s,;]+[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)*"
)
_TRIM = " \t\r\n\"'`*.!,;:()[]{}<>"


@dataclass(frozen=True)
class ParseResult:
    """What the parser made of a reply: the ``action`` (``None`` when invalid), the ``error``
    saying why not, the rule (``method``) that produced it, and whether a Box value was
    ``clipped`` to the bounds."""

    #: The env action, or ``None`` when the reply did not name a valid one.
    action: Any
    #: Why parsing failed (``None`` when it succeeded).
    error: str | None = None
    #: Which rule produced the action: exact, json, pattern, mention, numbers, custom.
    method: str | None = None
    #: True when a Box value was outside the bounds and was clipped.
    clipped: bool = False

    @property
    def valid(self) -> bool:
        return self.action is not None

    def info(self, reply: str, invalid_actions: int | None = None) -> dict[str, Any]:
        """The ``info`` keys every text env and :class:`ActionParserWrapper` report for a step,
        so logging code reads them the same way everywhere. ``invalid_actions`` defaults to
        this reply alone (1 if invalid, else 0)."""
        return {
            "action_text": reply,
            "action": self.action,
            "action_valid": self.valid,
            "parse_error": self.error,
            "parse_method": self.method,
            "action_clipped": self.clipped,
            "invalid_actions": int(not self.valid) if invalid_actions is None else invalid_actions,
        }


def _to_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None  # JSON true/false is not an action number
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        match = _NUMBER.fullmatch(value.strip(_TRIM))
        if match:
            return float(match.group())
    return None


class DiscreteParser:
    """Parses replies into a Discrete action given the ordered action names (the rules: this
    module's docstring).

    Args:
        names: the action names, in the env's order (index ``i`` is env action ``start + i``).
        start: the Discrete space's ``start`` (0 for almost every env).
        aliases: more words for an action, ``{"stick": ["stand", "stay"]}``.

    >>> parser = DiscreteParser(["stick", "hit"])
    >>> parser("With 12 against a 10 I hit.").action, parser("hit or stick?").valid
    (1, False)
    """

    def __init__(
        self,
        names: Sequence[str],
        start: int = 0,
        aliases: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.names = tuple(names)
        self.start = int(start)
        self._lookup = {self._norm(n): i for i, n in enumerate(self.names)}
        for name, synonyms in (aliases or {}).items():
            if self._norm(name) not in self._lookup:
                raise ValueError(
                    f"action_aliases names {name!r}, which is not an action ({self.names})."
                )
            for synonym in synonyms:
                self._lookup.setdefault(self._norm(synonym), self._lookup[self._norm(name)])
        values = [_to_number(n) for n in self.names]
        #: When every name is a number, numbers mean names (value -> index), not indices.
        self._numeric_names: dict[float, int] | None = (
            {v: i for i, v in enumerate(values) if v is not None}
            if all(v is not None and math.isfinite(v) for v in values)
            else None
        )
        words = {self._norm(w) for w in self.names} | {
            self._norm(a) for s in (aliases or {}).values() for a in s
        }
        alternation = "|".join(re.escape(n) for n in sorted(words - {""}, key=len, reverse=True))
        # Whole words and whole numbers only: "1" is not in "-1", "3.14", "2.5" or "v1".
        # Both match folded text against folded names (no re.IGNORECASE: see _STATEMENT_HEAD).
        self._mention = re.compile(rf"(?<![\w.+\-])(?:{alternation})(?![\w]|[.,]\d)")
        self._prefix = re.compile(rf"(?:{alternation})(?![\w]|[.,]\d)")

    @staticmethod
    def _norm(text: str) -> str:
        """A name or reply as the lookup compares it: folded, trimmed, single-spaced."""
        return " ".join(fold(text).strip(_TRIM).split())

    def _by_number(self, value: float | None) -> int | None:
        if value is None or not math.isfinite(value):
            return None
        if self._numeric_names is not None:
            named = self._numeric_names.get(value)
            return None if named is None else self.start + named
        if value != int(value):
            return None
        index = int(value) - self.start
        return self.start + index if 0 <= index < len(self.names) else None

    def resolve(self, value: Any) -> int | None:
        """An env action from a name or a number (int, float or numeric string), else ``None``."""
        if isinstance(value, str):
            index = self._lookup.get(self._norm(value))
            if index is not None:
                return self.start + index
        return self._by_number(_to_number(value))

    def _resolve_prefix(self, value: str) -> int | None:
        value = value.strip(_TRIM)
        match = self._prefix.match(value)
        index = self._lookup.get(self._norm(match.group())) if match else None
        if (
            match
            and index is not None
            and (self._numeric_names is None or number_stands_alone(value, 0, match.end()))
        ):
            return self.start + index
        number = _NUMBER.match(value)
        if number and number_stands_alone(value, 0, number.end()):
            return self._by_number(float(number.group()))
        return None

    def _mentions(self, clause: str) -> list[Mention]:
        """The action names in one clause (numbers only where they stand alone)."""
        found = []
        for match in self._mention.finditer(clause):
            numeric = self._numeric_names is not None and _NUMBER.fullmatch(match.group())
            if numeric and not number_stands_alone(clause, match.start(), match.end()):
                continue
            index = self._lookup.get(self._norm(match.group()))
            if index is not None:
                found.append(Mention(self.start + index, *match.span()))
        return found

    def _name(self, action: int) -> str:
        return self.names[action - self.start]

    def _json_verdict(self, text: str) -> ParseResult | None:
        """The JSON rule's verdict, or ``None`` when no JSON object states an action."""
        stated = [item for value in json_objects(text) for item in json_actions(value)]
        if not stated:
            return None
        actions = {
            self.resolve(item) if isinstance(item, str | int | float) else None for item in stated
        }
        if None in actions:
            return ParseResult(
                None, error=f'the JSON "action" is not one of {", ".join(self.names)}'
            )
        if len(actions) > 1:
            names = " and ".join(self._name(a) for a in sorted(a for a in actions if a is not None))
            return ParseResult(None, error=f"the JSON states two different actions ({names})")
        return ParseResult(actions.pop(), method="json")

    def _statements(self, text: str) -> Iterator[str]:
        """The values of ``Action: X`` statements, last first, each ending where the next begins."""
        for match in reversed(list(_STATEMENT_HEAD.finditer(text))):
            clause_start = max(text.rfind(c, 0, match.start()) for c in ",.;:!?\n") + 1
            before = text[clause_start : match.start()]
            if negated_before(before, len(before)) or is_condition(before):
                continue  # "I will not move right", "If every move is 10" state no move
            value_start = match.end()
            end = _STATEMENT_END.search(text, value_start)
            yield text[value_start : end.start() if end else len(text)]

    def __call__(self, text: str) -> ParseResult:
        action = self.resolve(text)
        if action is not None:
            return ParseResult(action, method="exact")
        text = fold(text)
        verdict = self._json_verdict(text)
        if verdict is not None:
            return verdict
        text = without_struck(without_json(text))
        for value in self._statements(text):
            action = self._resolve_prefix(value)
            if action is None:
                continue
            others = set()
            for clause in _first_clauses(value):
                others |= {m.action for m in self._mentions(clause)}
            others -= {action}
            if others:
                names = " and ".join(self._name(a) for a in sorted({action, *others}))
                return ParseResult(
                    None, error=f"the statement names two different actions ({names}); state one"
                )
            return ParseResult(action, method="pattern")
        decision = decide(text, self._mentions, self._name)
        if decision.action is not None:
            return ParseResult(decision.action, method="mention")
        return ParseResult(
            None,
            error=decision.error
            or f"no valid action found; expected one of {', '.join(self.names)}",
        )


def _first_clauses(value: str) -> list[str]:
    """What a statement's value states: up to its first sentence end or comma, and the next
    comma-clause too when it is one more item of a list (``Answer: north, south``)."""
    first, *rest = re.split(r"(?<=[.!?])\s|\n", value, maxsplit=1)[0].split(",")
    items = [first]
    if (
        rest
        and re.fullmatch(r"[\s\"'`*]*[\w ]{1,20}[\s\"'`*.!]*", rest[0])
        and len(rest[0].split()) <= 2
    ):
        items.append(rest[0])
    return items


class NumericParser:
    """Parses replies into a Box, MultiDiscrete or MultiBinary action (numbers in text).

    Args:
        space: the env's numeric action space.
        any_numbers: also take the last numbers anywhere in the reply (off: a reply must state
            its action as JSON, an ``Action: ...`` statement, or numbers only).
    """

    def __init__(
        self,
        space: spaces.Box | spaces.MultiDiscrete | spaces.MultiBinary,
        any_numbers: bool = False,
    ) -> None:
        if not isinstance(space, spaces.Box | spaces.MultiDiscrete | spaces.MultiBinary):
            raise TypeError(
                f"NumericParser needs a Box, MultiDiscrete or MultiBinary, got {space!r}."
            )
        self.space = space
        self.size = int(np.prod(space.shape)) if space.shape else 1
        #: Also take the last numbers anywhere in the reply (off: a reply must state its action
        #: as a JSON value, an ``Action: ...`` statement, or consist of numbers only).
        self.any_numbers = any_numbers

    def _numbers(self, text: str) -> Iterator[tuple[str, list[float]]]:
        for value in json_objects(text):
            found, item = json_action(value)
            candidate = item if found else value
            if isinstance(candidate, list):
                flat = np.asarray(candidate, dtype=object).ravel().tolist() if candidate else []
                parsed = [_to_number(v) for v in flat]
                values = [n for n in parsed if n is not None]
                if values and len(values) == len(parsed):
                    yield "json", values
            elif found:
                number = _to_number(candidate)
                if number is not None:
                    yield "json", [number]
        stripped = text.strip(_TRIM)
        if stripped and _ONLY_NUMBERS.fullmatch(stripped):
            yield "exact", [float(n) for n in _NUMBER.findall(stripped)]
        free = without_json(text)
        for match in reversed(list(_STATEMENT.finditer(free))):
            numbers = [float(n) for n in _NUMBER.findall(match.group("value"))]
            if numbers:
                yield "pattern", numbers
        everywhere = [float(n) for n in _NUMBER.findall(text)] if self.any_numbers else []
        if everywhere:
            yield "numbers", everywhere

    def __call__(self, text: str) -> ParseResult:
        text = fold(text)
        error = f"expected {self.size} number(s), found none"
        for method, numbers in self._numbers(text):
            if len(numbers) < self.size:
                error = f"expected {self.size} number(s), found {len(numbers)}"
                continue
            result = self._convert(numbers[-self.size :], method)
            if result.valid:
                return result
            error = result.error or error
        return ParseResult(None, error=error)

    def _convert(self, numbers: list[float], method: str) -> ParseResult:
        space = self.space
        values = np.asarray(numbers, dtype=np.float64)
        if not np.all(np.isfinite(values)) and not isinstance(space, spaces.Box):
            return ParseResult(None, error="numbers must be finite")
        if np.any(np.isnan(values)):
            return ParseResult(None, error="NaN is not a valid action value")
        if isinstance(space, spaces.Box):
            low = np.broadcast_to(space.low, space.shape).ravel().astype(np.float64)
            high = np.broadcast_to(space.high, space.shape).ravel().astype(np.float64)
            clipped = np.clip(values, low, high)
            action = clipped.reshape(space.shape).astype(space.dtype)
            return ParseResult(action, method=method, clipped=bool(np.any(clipped != values)))
        if np.any(values != np.round(values)) or np.any(np.abs(values) > 2**62):
            return ParseResult(None, error="values must be whole numbers in range")
        action = values.astype(np.int64).reshape(space.shape).astype(space.dtype)
        if not space.contains(action):
            return ParseResult(None, error=f"{action.tolist()} is outside {space}")
        return ParseResult(action, method=method)
