"""Robust reply → env action parsing, the part of an LLM agent that must never crash.

Rules for a Discrete action set with names (first rule that yields a valid action wins):

1. **exact**: the whole reply, trimmed of whitespace, quotes, backticks, ``*`` and a final period,
   is an action name (case-insensitive) or an action number.
2. **json**: a JSON object in the reply (a fenced ```json block or any ``{...}``) with an
   ``"action"`` key whose value is an action name or number.
3. **pattern**: the last ``Action: X`` statement (also ``Answer:``, ``Choice:``, ``Move:``,
   ``Decision:``, with ``:`` or ``=``, optionally ``... is X``) where X starts with a name or number.
4. **mention**: the **last** action name mentioned anywhere in free text (whole words; longer names
   win over names they contain, so ``push left`` beats ``left``). The last one is taken because
   models usually reason first and state the decision at the end.

Numbers mean env action values (``start + index``; for almost all envs simply the index), except
when every action name is itself a number (``GuessNumber``'s ``"1"`` … ``"16"``): then a number
means the action of that name, so ``3``, ``"3"`` and ``{"action": 3}`` all pick the action named
``"3"``.

For numeric action spaces (Box, MultiDiscrete, MultiBinary) with ``n`` elements: a JSON
``{"action": [...]}`` or a JSON list, then the numbers of the last ``Action: ...`` statement, then
the **last n numbers** in the reply. Box values are clipped to the bounds (reported as clipped);
MultiDiscrete/MultiBinary values outside the space, non-integers, NaN or too few numbers are invalid.

No parser here ever raises on a string: failures come back as a :class:`ParseResult` with an error.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_STATEMENT = re.compile(
    r"\b(?:final\s+)?(?:action|answer|choice|move|decision)\s*(?:is\s*)?[:=]?\s*(?:is\s+)?"
    r"[\"'`*\[\(]*(?P<value>[^\n]*)",
    re.IGNORECASE,
)
_ONLY_NUMBERS = re.compile(
    r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?:[\s,;]+[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)*"
)
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.IGNORECASE | re.DOTALL)
_TRIM = " \t\r\n\"'`*.!,;:()[]{}<>"


@dataclass(frozen=True)
class ParseResult:
    """What the parser made of a reply."""

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


def _json_objects(text: str) -> Iterator[Any]:
    """Every JSON value found in fenced blocks, then every balanced ``{...}`` / ``[...]``."""
    for block in _FENCE.findall(text):
        try:
            value = json.loads(block)
        except (ValueError, RecursionError):
            continue
        yield value
    decoder = json.JSONDecoder()
    for i, char in enumerate(text):
        if char in "{[":
            try:
                value, _ = decoder.raw_decode(text, i)
            except (ValueError, RecursionError):
                continue
            yield value


def _without_json(text: str) -> str:
    """``text`` with every balanced JSON object or list blanked out, so that rules reading free
    text never fire inside JSON (``{"action": [1, 2]}`` does not state ``action: 1``)."""
    decoder = json.JSONDecoder()
    out, i = [], 0
    while i < len(text):
        if text[i] in "{[":
            try:
                _, end = decoder.raw_decode(text, i)
            except (ValueError, RecursionError):
                end = 0
            if end > i:
                out.append(" " * (end - i))
                i = end
                continue
        out.append(text[i])
        i += 1
    return "".join(out)


def _json_action(value: Any) -> tuple[bool, Any]:
    """``(found, action value)`` from a decoded JSON value with an ``action`` key."""
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and key.strip().lower() == "action":
                return True, item
    return False, None


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
    """Parses replies into a Discrete action given the ordered action names."""

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
        words = [*self.names, *(a for s in (aliases or {}).values() for a in s)]
        alternation = "|".join(re.escape(n) for n in sorted(words, key=len, reverse=True))
        # Whole words and whole numbers only: "1" is not in "-1", "3.14", "2.5" or "v1".
        self._mention = re.compile(rf"(?<![\w.+\-])(?:{alternation})(?![\w]|[.,]\d)", re.IGNORECASE)
        self._prefix = re.compile(rf"(?:{alternation})(?![\w]|[.,]\d)", re.IGNORECASE)

    @staticmethod
    def _norm(text: str) -> str:
        return " ".join(text.strip(_TRIM).lower().split())

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
        if match:
            return self.start + self._lookup[self._norm(match.group())]
        number = _NUMBER.match(value)
        if number and not value[number.end() : number.end() + 1].isalnum():
            return self._by_number(float(number.group()))
        return None

    def __call__(self, text: str) -> ParseResult:
        action = self.resolve(text)
        if action is not None:
            return ParseResult(action, method="exact")
        stated = False
        for value in _json_objects(text):
            found, item = _json_action(value)
            if found:
                action = self.resolve(item) if isinstance(item, str | int | float) else None
                if action is not None:
                    return ParseResult(action, method="json")
                stated = True
        if stated:  # the reply named its action in JSON, and that is not one: no guessing
            return ParseResult(
                None,
                error=f'the JSON "action" is not one of {", ".join(self.names)}',
            )
        text = _without_json(text)
        for match in reversed(list(_STATEMENT.finditer(text))):
            action = self._resolve_prefix(match.group("value"))
            if action is not None:
                return ParseResult(action, method="pattern")
        mentions = self._mention.findall(text)
        if mentions:
            return ParseResult(
                self.start + self._lookup[self._norm(mentions[-1])], method="mention"
            )
        return ParseResult(
            None, error=f"no valid action found; expected one of {', '.join(self.names)}"
        )


class NumericParser:
    """Parses replies into a Box, MultiDiscrete or MultiBinary action (numbers in text)."""

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
        for value in _json_objects(text):
            found, item = _json_action(value)
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
        free = _without_json(text)
        for match in reversed(list(_STATEMENT.finditer(free))):
            numbers = [float(n) for n in _NUMBER.findall(match.group("value"))]
            if numbers:
                yield "pattern", numbers
        everywhere = [float(n) for n in _NUMBER.findall(text)] if self.any_numbers else []
        if everywhere:
            yield "numbers", everywhere

    def __call__(self, text: str) -> ParseResult:
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
