"""Reply patterns: a regular expression every generate-mode reply must match, as a token mask.

Where an action space is open (a number in a range, a word of five letters, ``\\boxed{N}``), no
list of actions can be written down, but a regular expression can. The pattern is compiled to
a nondeterministic automaton over characters; the tokens allowed after a reply's prefix are
those whose text keeps the automaton alive, and the stop token is allowed once the prefix
matches in full. The masks serve the rollout and the update alike
(:mod:`gym_llm.policy.constraints`), so PPO's ratio stays exact.

Supported: literals, ``.``, character classes (ranges, ``\\d \\w \\s`` and their negations,
negated classes), alternation, groups, and repetition (``* + ? {m,n}``, lazy or greedy, which
match the same strings). Anchors are accepted and ignored (the whole reply must match anyway);
back-references, look-arounds and inline flags are refused.

>>> auto = PatternAutomaton(r"[1-9]\\d?", ["1", "12", "a", " 3", "0", "</s>"], stop_id=5)
>>> sorted(auto.allowed([]))  # "1" and "12" start a number; "0", "a" and " 3" cannot
[0, 1]
>>> sorted(auto.allowed([0]))  # after "1": one more digit, or stop
[0, 4, 5]
>>> auto.finished([1])  # "12": two digits, nothing can follow
True
"""

from __future__ import annotations

import re
import re._constants as sre_constants  # Python 3.11+: the parser behind ``re``
import re._parser as sre_parse
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

CharTest = Callable[[str], bool]


def _equals(code: int) -> CharTest:
    return lambda ch: ord(ch) == code


def _differs(code: int) -> CharTest:
    return lambda ch: ord(ch) != code


def _within(low: int, high: int) -> CharTest:
    return lambda ch: low <= ord(ch) <= high


_CATEGORIES: dict[Any, CharTest] = {
    sre_constants.CATEGORY_DIGIT: str.isdigit,
    sre_constants.CATEGORY_NOT_DIGIT: lambda c: not c.isdigit(),
    sre_constants.CATEGORY_SPACE: str.isspace,
    sre_constants.CATEGORY_NOT_SPACE: lambda c: not c.isspace(),
    sre_constants.CATEGORY_WORD: lambda c: c.isalnum() or c == "_",
    sre_constants.CATEGORY_NOT_WORD: lambda c: not (c.isalnum() or c == "_"),
}


class PatternError(ValueError):
    """A reply pattern that does not compile, or uses what a token mask cannot follow."""


class CharAutomaton:
    """A regular expression as a nondeterministic automaton over characters (Thompson's)."""

    def __init__(self, pattern: str) -> None:
        try:
            parsed = sre_parse.parse(pattern)
        except re.error as exc:
            raise PatternError(
                f"reply pattern {pattern!r} is not a regular expression: {exc}"
            ) from None
        if parsed.state.flags & ~int(re.UNICODE):
            raise PatternError(
                f"reply pattern {pattern!r}: inline flags are not supported; spell the cases out "
                "(e.g. [Aa] for a case-insensitive a)."
            )
        self.pattern = pattern
        #: Per state: character edges ``(test, next state)`` and empty edges.
        self.edges: list[list[tuple[CharTest, int]]] = []
        self.empty: list[list[int]] = []
        start = self._new()
        self.accept = self._build(list(parsed), start)
        self.start = self.closure({start})
        #: Per state: the fewest characters that lead from it to a full match.
        self.distance = self._distances()

    def _new(self) -> int:
        self.edges.append([])
        self.empty.append([])
        return len(self.edges) - 1

    def _char(self, at: int, test: CharTest) -> int:
        end = self._new()
        self.edges[at].append((test, end))
        return end

    def _build(self, items: Sequence[Any], at: int) -> int:
        """Adds ``items`` (a parsed sequence) after state ``at``; returns the state they end in."""
        for op, arg in items:
            at = self._item(op, arg, at)
        return at

    def _item(self, op: Any, arg: Any, at: int) -> int:
        c = sre_constants
        if op is c.LITERAL:
            return self._char(at, _equals(arg))
        if op is c.NOT_LITERAL:
            return self._char(at, _differs(arg))
        if op is c.ANY:
            return self._char(at, lambda ch: ch != "\n")
        if op is c.IN:
            return self._char(at, _class_test(arg, self.pattern))
        if op is c.SUBPATTERN:
            _group, add_flags, del_flags, inner = arg
            if add_flags or del_flags:
                raise PatternError(
                    f"reply pattern {self.pattern!r}: inline flags are not supported."
                )
            return self._build(list(inner), at)
        if op is c.BRANCH:
            join = self._new()
            for branch in arg[1]:
                start = self._new()
                self.empty[at].append(start)
                self.empty[self._build(list(branch), start)].append(join)
            return join
        if op in (c.MAX_REPEAT, c.MIN_REPEAT, getattr(c, "POSSESSIVE_REPEAT", c.MAX_REPEAT)):
            low, high, inner = arg
            for _ in range(low):
                at = self._build(list(inner), at)
            if high is c.MAXREPEAT:
                loop = self._new()
                self.empty[at].append(loop)
                self.empty[self._build(list(inner), loop)].append(loop)
                return loop
            exits = [at]
            for _ in range(high - low):
                at = self._build(list(inner), at)
                exits.append(at)
            join = self._new()
            for state in exits:
                self.empty[state].append(join)
            return join
        if op is c.AT:
            return at  # the whole reply must match: anchors add nothing
        raise PatternError(
            f"reply pattern {self.pattern!r}: {str(op).lower()} is not supported in reply patterns "
            "(literals, classes, alternation, groups and repetition are)."
        )

    def _distances(self) -> list[float]:
        """Fewest characters from each state to the accepting one (0-1 BFS, edges reversed)."""
        into: list[list[tuple[int, int]]] = [[] for _ in self.edges]
        for state, (chars, empties) in enumerate(zip(self.edges, self.empty, strict=True)):
            for _test, nxt in chars:
                into[nxt].append((state, 1))
            for nxt in empties:
                into[nxt].append((state, 0))
        distance = [float("inf")] * len(self.edges)
        distance[self.accept] = 0
        queue = deque([self.accept])
        while queue:
            state = queue.popleft()
            for before, cost in into[state]:
                if distance[state] + cost < distance[before]:
                    distance[before] = distance[state] + cost
                    (queue.appendleft if cost == 0 else queue.append)(before)
        return distance

    def shortest(self, states: frozenset[int]) -> float:
        """The fewest characters that complete a match from ``states`` (inf: none can)."""
        return min((self.distance[s] for s in states), default=float("inf"))

    def closure(self, states: set[int]) -> frozenset[int]:
        """``states`` and every state their empty edges reach."""
        todo, seen = list(states), set(states)
        while todo:
            for nxt in self.empty[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return frozenset(seen)

    def step(self, states: frozenset[int], ch: str) -> frozenset[int]:
        return self.closure({nxt for s in states for test, nxt in self.edges[s] if test(ch)})

    def can_continue(self, states: frozenset[int]) -> bool:
        return any(self.edges[s] for s in states)

    def matches(self, text: str) -> bool:
        """Whether ``text`` matches in full (what :func:`re.fullmatch` says, for these patterns)."""
        states = self.start
        for ch in text:
            states = self.step(states, ch)
        return self.accept in states


def _class_test(items: Sequence[Any], pattern: str) -> CharTest:
    """The test of one character class (``[...]``, ``\\d``, ...)."""
    c = sre_constants
    tests: list[CharTest] = []
    negate = False
    for op, arg in items:
        if op is c.NEGATE:
            negate = True
        elif op is c.LITERAL:
            tests.append(_equals(arg))
        elif op is c.RANGE:
            tests.append(_within(*arg))
        elif op is c.CATEGORY and arg in _CATEGORIES:
            tests.append(_CATEGORIES[arg])
        else:
            raise PatternError(f"reply pattern {pattern!r}: class item {op} is not supported.")
    if negate:
        return lambda ch: not any(t(ch) for t in tests)
    return lambda ch: any(t(ch) for t in tests)


class PatternAutomaton:
    """The tokens a reply may take next under a pattern, by the text each token spells.

    ``token_texts[i]`` is token ``i``'s text (``None`` or ``""``: never allowed, e.g. special
    tokens and byte pieces that are no whole character). The allowed set of each automaton state
    is computed once (a pass over the vocabulary) and kept. With a ``budget`` (the reply's most
    tokens), a token is allowed only if a match can still be completed in the tokens left (one
    character per token at worst), so a reply never runs out of room half-way.
    """

    def __init__(
        self,
        pattern: str,
        token_texts: Sequence[str | None],
        stop_id: int,
        budget: int | None = None,
    ) -> None:
        self.chars = CharAutomaton(pattern)
        self.pattern = pattern
        self.stop_id = stop_id
        self.texts = [t if t and "\ufffd" not in t else None for t in token_texts]
        self._steps: dict[tuple[frozenset[int], str], frozenset[int]] = {}
        self._states: dict[tuple[int, ...], frozenset[int]] = {(): self.chars.start}
        self._allowed: dict[tuple[frozenset[int], int | None], set[int]] = {}
        self.budget = budget
        finite = [d for d in self.chars.distance if d != float("inf")]
        #: Beyond this many tokens left, the budget cannot bind: one mask per state serves.
        self._horizon = int(max(finite, default=0)) + 1
        #: Calibration constants: none for patterns (the interface of :class:`.ActionTrie`).
        self.bias: dict[tuple[int, ...], dict[int, float]] = {}
        if not self.allowed([]) - {stop_id} and self.chars.accept not in self.chars.start:
            raise PatternError(
                f"reply pattern {pattern!r}: no token of this tokenizer can start a match."
            )

    def _step(self, states: frozenset[int], ch: str) -> frozenset[int]:
        key = (states, ch)
        if key not in self._steps:
            self._steps[key] = self.chars.step(states, ch)
        return self._steps[key]

    def _walk(self, states: frozenset[int], text: str) -> frozenset[int]:
        for ch in text:
            states = self._step(states, ch)
            if not states:
                break
        return states

    def state(self, prefix: Sequence[int]) -> frozenset[int]:
        """The automaton's states after the reply's tokens ``prefix`` (empty: off the pattern)."""
        key = tuple(int(t) for t in prefix)
        if key not in self._states:
            before = self.state(key[:-1])
            text = self.texts[key[-1]] if key[-1] < len(self.texts) else None
            self._states[key] = self._walk(before, text) if text and before else frozenset()
        return self._states[key]

    def allowed(self, prefix: Sequence[int]) -> set[int]:
        """The tokens that may follow ``prefix``: those that keep a match possible, and the stop
        token once ``prefix`` matches in full (the stop token alone off the pattern)."""
        states = self.state(prefix)
        if not states:
            return {self.stop_id}
        left = None if self.budget is None else self.budget - len(prefix)
        if left is not None and left > self._horizon:
            left = None
        key = (states, left)
        if key not in self._allowed:
            room = float("inf") if left is None else left - 1  # tokens after this one
            ok = set()
            for i, text in enumerate(self.texts):
                if text is None or i == self.stop_id:
                    continue
                after = self._walk(states, text)
                if after and self.chars.shortest(after) <= room:
                    ok.add(i)
            if self.chars.accept in states:
                ok.add(self.stop_id)
            self._allowed[key] = ok
        return self._allowed[key]

    def finished(self, prefix: Sequence[int]) -> bool:
        """Whether the reply is done: it matches in full and nothing can continue it, or it
        ended with the stop token."""
        if prefix and int(prefix[-1]) == self.stop_id:
            return True
        states = self.state(prefix)
        return self.chars.accept in states and not self.chars.can_continue(states)


def token_texts(tokenizer: Any) -> list[str | None]:
    """Each token's text as a reply spells it (special tokens: ``None``)."""
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    size = len(tokenizer)
    texts = tokenizer.batch_decode([[i] for i in range(size)], skip_special_tokens=False)
    return [None if i in special else str(t) for i, t in enumerate(texts)]
