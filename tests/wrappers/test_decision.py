"""The clause reader's pieces, without a parser: numbers, clauses, idioms, decisions."""

from __future__ import annotations

import re

import pytest

from gym_llm.wrappers.decision import (
    Mention,
    clauses,
    decide,
    is_condition,
    negated_before,
    number_stands_alone,
    without_struck,
)


@pytest.mark.parametrize(
    ("text", "alone"),
    [
        ("2", True),
        ("2.", True),
        ("2 (right)", True),
        ("2 because it is safe", True),
        ("2 steps", False),
        ("0 risk", False),
        ("1 more card", False),
        ("14-percent", False),
        ("1/30", False),
        ("50%", False),
        ("1 to 16", False),
    ],
)
def test_a_number_stands_alone_only_as_a_choice(text: str, alone: bool) -> None:
    end = len(re.match(r"\d+", text).group())
    assert number_stands_alone(text, 0, end) == alone


def test_numbers_inside_ranges_and_fractions_are_not_choices() -> None:
    text = "between 1 and 16"
    assert not number_stands_alone(text, text.index("16"), text.index("16") + 2)
    text = "from 1 to 16"
    assert not number_stands_alone(text, text.index("16"), text.index("16") + 2)


def test_clauses_know_the_later_moves_of_a_plan() -> None:
    parts = list(clauses("I hit, then stick. Next, I wait. Then done"))
    assert [c.sequel for c in parts] == [False, True, True, True, True]


def test_clauses_know_questions_conditions_and_conclusions() -> None:
    parts = list(clauses("Should I hit? If I hit I bust, so I stick."))
    assert [c.question for c in parts] == [True, False, False]
    assert [c.condition for c in parts] == [False, True, False]
    assert [c.concludes for c in parts] == [False, False, True]
    assert is_condition("because the hole is there") and not is_condition("I go left")


def test_negations_reach_back_to_the_clause_start() -> None:
    clause = "I can't decide between hit and stick"
    assert negated_before(clause, clause.index("stick"))
    assert not negated_before("I hit", 2)


def test_struck_text_is_blanked_in_place() -> None:
    text = "~~hit~~ stick <del>hit</del>"
    out = without_struck(text)
    assert len(out) == len(text) and "hit" not in out and "stick" in out


WORDS = ("stick", "hit")


def _find(clause: str) -> list[Mention]:
    return [
        Mention(WORDS.index(m.group().lower()), *m.span())
        for m in re.finditer(r"\b(?:stick|hit)\b", clause, re.IGNORECASE)
    ]


@pytest.mark.parametrize(
    ("text", "action", "error"),
    [
        ("I stick.", 0, None),
        ("If I hit I might bust, so I stick.", 0, None),
        ("Stick? No. Hit!", 1, None),
        ("hit or stick", None, "two different actions"),
        ("hit, stick", None, "two different actions"),
        ("I would not hit.", None, "only rules out"),
        ("Should I hit?", None, "asks"),
        ("If I hit, I bust.", None, "conditions"),
        ("I hit. I will not hit.", None, "both takes and rules out"),
        ("hit or miss", None, None),
        # a plan sends its first move, never a later one
        ("hit then stick", 1, None),
        ("First stick, then hit.", 0, None),
        ("stick. Then hit", 0, None),
        ("I will hit and then stick if I have to", 1, None),
        ("stick. Next, hit", 0, None),
        ("Hit now and stick later", None, "two different actions"),
        # ... but after a condition, "then" is its consequence, which decides
        ("If the total is low, then hit.", 1, None),
        ("Then I will hit", 1, None),
        # a mention the reply rules out chooses nothing
        ("0 chance I hit", None, "only rules out"),
        ("There is zero chance I stick", None, "only rules out"),
        ("no way I would hit, stick", 0, None),
        ("hit. 0% chance I stick", 1, None),
    ],
)
def test_decide(text: str, action: int | None, error: str | None) -> None:
    decision = decide(text, _find, lambda a: WORDS[a])
    assert decision.action == action
    assert (decision.error is None) if error is None else (error in (decision.error or ""))
