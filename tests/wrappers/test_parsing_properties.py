"""Property tests of the parser: garbage never becomes a valid action.

A reply maps to a valid action only if it contains the action as a whole word or a whole number;
numbers inside other numbers (``-1``, ``3.14``, ``2.5``, ``v1``) and JSON values of the wrong type
never count.
"""

from __future__ import annotations

import re

import numpy as np
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st

from gym_llm.wrappers.parsing import DiscreteParser, NumericParser

NUMERIC_NAMES = DiscreteParser(["0", "1", "2", "3"])
WORD_NAMES = DiscreteParser(["stick", "hit"])

#: Text with no whole-number token 0-3 and no action word: letters, punctuation, and numbers
#: that only contain the digits inside other numbers.
_junk_words = st.sampled_from(
    ["-1", "3.14", "2.5", "v1", "12", "x3", "0.5", "-3", "1e5", "1.0.2", "hits", "sticker", "whit"]
)
_prose = st.text(alphabet="abcdefgjklmnopqruvwxyz ,;!?()'\"\n", max_size=40)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(_junk_words, _prose), max_size=8))
def test_numbers_inside_other_numbers_and_words_never_parse(parts: list[str]) -> None:
    reply = " ".join(parts)
    assert not NUMERIC_NAMES(reply).valid, reply
    assert not WORD_NAMES(reply).valid, reply


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.booleans(),
        st.lists(st.integers(0, 3), min_size=1, max_size=3),
        st.dictionaries(st.text(max_size=3), st.integers(0, 3), min_size=1, max_size=2),
        st.floats(allow_nan=True).filter(lambda x: not float(x).is_integer()),
    ),
    _prose,
)
def test_json_actions_of_the_wrong_type_are_invalid(value: object, prose: str) -> None:
    import json

    reply = json.dumps({"action": value}) + " " + prose
    assert not NUMERIC_NAMES(reply).valid, reply


_stop = st.sampled_from([".", ",", "!", "\n", " (", " because", " is"])


@settings(max_examples=300, deadline=None)
@given(_prose, st.integers(0, 3), _stop, _prose)
def test_a_stated_number_standing_alone_is_found(
    before: str, action: int, stop: str, after: str
) -> None:
    reply = f"{before} Action: {action}{stop} {after}"
    assert NUMERIC_NAMES(reply).action == action, reply


@settings(max_examples=300, deadline=None)
@given(_prose, st.integers(0, 3), st.sampled_from(["steps", "risk", "more", "cards", "times"]))
def test_a_number_followed_by_a_quantity_word_is_no_action(
    before: str, number: int, unit: str
) -> None:
    # "Move 2 steps", "Answer: 0 risk": a quantity, not action 2 or 0.
    for reply in (f"{before} Action: {number} {unit}", f"{before} {number} {unit}"):
        assert not NUMERIC_NAMES(reply).valid, reply


_words = st.sampled_from(["stick", "hit"])
_calm = st.text(alphabet="abcdefgjklmoqruvwxyz ", max_size=30)  # no negation, no action word


@settings(max_examples=200, deadline=None)
@given(_calm, st.permutations(["stick", "hit"]), st.sampled_from([" or ", " / ", " and "]))
def test_a_clause_naming_two_actions_is_invalid(before: str, pair: list[str], join: str) -> None:
    reply = f"{before}. {pair[0]}{join}{pair[1]}"
    assert not WORD_NAMES(reply).valid, reply


@settings(max_examples=200, deadline=None)
@given(_calm, _words, st.sampled_from(["I would not {}.", "Don't {}.", "Should I {}?"]))
def test_negated_or_asked_actions_are_invalid(before: str, word: str, form: str) -> None:
    reply = f"{before}. {form.format(word)}"
    assert not WORD_NAMES(reply).valid, reply


@settings(max_examples=200, deadline=None)
@given(_calm, st.permutations(["stick", "hit"]), st.sampled_from(["; ", " ", ", ", "\n"]))
def test_the_last_statement_wins(before: str, pair: list[str], gap: str) -> None:
    reply = f"{before} Action: {pair[0]} (0.3){gap}Action: {pair[1]} (0.7)"
    assert WORD_NAMES(reply).action == ["stick", "hit"].index(pair[1]), reply


@settings(max_examples=200, deadline=None)
@given(st.permutations(["stick", "hit"]), _calm)
def test_a_conclusion_after_reasoning_decides(pair: list[str], middle: str) -> None:
    reply = f"If I {pair[0]} {middle}, so I {pair[1]}."
    assert WORD_NAMES(reply).action == ["stick", "hit"].index(pair[1]), reply


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz .,!?-", max_size=5000))
def test_box_replies_without_digits_are_invalid_and_stated_numbers_parse(junk: str) -> None:
    parser = NumericParser(spaces.Box(-1, 1, (1,)))
    assert not parser(junk).valid
    # A number in prose is not an action, unless the prose states it ("... choice 3.14").
    statement = re.search(r"action|answer|choice|move|decision", junk)
    if statement is None and not re.fullmatch(r"[\s.,!?-]*", junk):
        assert not parser(junk + " 3.14 " + junk).valid
    stated = parser(f"{junk}\nAction: 0.25")
    assert stated.valid and np.allclose(stated.action, [0.25])


_ACTION_SETS = (
    ("stick", "hit"),
    ("left", "down", "right", "up"),
    ("north", "south", "east", "west"),
)
_PLANS = (
    "{a} then {b}",
    "{a}, then {b}",
    "First {a}, then {b}.",
    "{a}. Then {b}",
    "I will {a} and then {b}.",
    "{a}. Next, {b}",
    "I'd {a}; afterwards {b}",
    "{a}, followed by {b}",
)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(_ACTION_SETS).flatmap(
        lambda names: st.tuples(
            st.just(names),
            st.permutations(names).map(lambda p: p[:2]),
            st.sampled_from(_PLANS),
            st.sampled_from(["", "I think ", "OK. "]),
        )
    )
)
def test_a_plan_sends_its_first_move_or_nothing(
    case: tuple[tuple[str, ...], tuple[str, ...], str, str],
) -> None:
    names, (first, later), plan, lead = case
    reply = lead + plan.format(a=first, b=later)
    parsed = DiscreteParser(list(names))(reply)
    assert parsed.action in (names.index(first), None), reply
