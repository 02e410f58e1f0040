"""Reply patterns: the character automaton agrees with ``re.fullmatch``, and the token masks keep
every reply a match and leave room to finish it (the policy's use: tests/policy/test_constraints.py)."""

from __future__ import annotations

import doctest
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gym_llm.grammar
from gym_llm.grammar import CharAutomaton, PatternAutomaton, PatternError
from gym_llm.spaces import TextActions

PATTERNS = [
    r"[1-9]\d?|100",
    r"[a-z]{5}",
    r"\\boxed\{\d{1,2}\}",
    r"(north|south)( then (east|west))?",
    r"[^ab]+c*?",
    r"x.y\s\w\W\D\S",
]


def test_docstring_examples() -> None:
    assert doctest.testmod(gym_llm.grammar).failed == 0


@settings(max_examples=300, deadline=None)
@given(
    pattern=st.sampled_from(PATTERNS),
    text=st.text(alphabet="abcxyz019 {}\\ohnrtsewb_-.", max_size=12),
)
def test_the_automaton_matches_what_re_matches(pattern: str, text: str) -> None:
    assert CharAutomaton(pattern).matches(text) == bool(re.fullmatch(pattern, text))


@pytest.mark.parametrize("pattern", PATTERNS[:4])
def test_matches_of_the_pattern_are_matched(pattern: str) -> None:
    auto = CharAutomaton(pattern)
    for text in ("42", "100", "apple", r"\boxed{7}", "north then west", "south"):
        assert auto.matches(text) == bool(re.fullmatch(pattern, text)), text


def test_what_a_mask_cannot_follow_is_refused_with_the_reason() -> None:
    for pattern, reason in [
        (r"(a)\1", "groupref"),
        (r"(?=a)b", "assert"),
        (r"(?i)abc", "inline flags"),
        (r"[a-", "not a regular expression"),
    ]:
        with pytest.raises(PatternError, match=re.escape(reason)):
            CharAutomaton(pattern)
    with pytest.raises(PatternError, match="no token of this tokenizer can start"):
        PatternAutomaton("[0-9]", ["a", "b"], stop_id=1)
    with pytest.raises(PatternError, match="inline flags"):
        TextActions(pattern="(?i)yes")


def test_token_masks_keep_every_prefix_on_the_pattern() -> None:
    texts = ["1", "2", "0", "10", "100", "a", "12 ", "</s>"]
    auto = PatternAutomaton(r"[1-9]\d?|100", texts, stop_id=7)
    assert auto.allowed([]) == {0, 1, 3, 4}  # "0", "a" and "12 " cannot start it
    assert auto.allowed([0]) == {
        0,
        1,
        2,
        7,
    }  # after "1": one more digit ("10" would be 110), or stop
    assert not auto.finished([0]) and auto.finished([3, 2]) and auto.finished([4])
    assert auto.allowed([5]) == {7}  # off the pattern (never sampled): only the stop token
    rng = np.random.default_rng(0)
    for _ in range(200):  # random walks through the masks always spell a match
        prefix: list[int] = []
        while not auto.finished(prefix) and len(prefix) < 6:
            prefix.append(int(rng.choice(sorted(auto.allowed(prefix)))))
        text = "".join(texts[t] for t in prefix if t != 7)
        if auto.finished(prefix):
            assert re.fullmatch(r"[1-9]\d?|100", text), text


def test_a_budget_keeps_room_to_finish_the_match() -> None:
    texts = ["a", "b", "aa", "</s>"]
    free = PatternAutomaton("a{0,10}b", texts, stop_id=3)
    tight = PatternAutomaton("a{0,10}b", texts, stop_id=3, budget=3)
    assert free.allowed([0, 0]) == {0, 1, 2}
    assert tight.allowed([]) == {0, 1, 2} and tight.allowed([0]) == {0, 1, 2}
    assert tight.allowed([0, 0]) == {1}  # one token left: only "b" completes the match
    assert CharAutomaton("a{0,10}b").shortest(CharAutomaton("a{0,10}b").start) == 1
