from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st

from gym_llm.wrappers.parsing import DiscreteParser, NumericParser

BLACKJACK = DiscreteParser(["stick", "hit"])
CARTPOLE = DiscreteParser(["push left", "push right"])
FROZEN = DiscreteParser(["left", "down", "right", "up"])


@pytest.mark.parametrize(
    ("parser", "text", "action", "method"),
    [
        (BLACKJACK, "hit", 1, "exact"),
        (BLACKJACK, "  'Stick'. ", 0, "exact"),
        (BLACKJACK, "**HIT**", 1, "exact"),
        (BLACKJACK, "1", 1, "exact"),
        (BLACKJACK, '{"action": "stick"}', 0, "json"),
        (BLACKJACK, 'Sure! ```json\n{"Action": 1}\n```', 1, "json"),
        (BLACKJACK, 'I think {"thought": "17 is high", "action": "stick"} is best', 0, "json"),
        (BLACKJACK, "Let me think: hit is risky.\nAction: stick", 0, "pattern"),
        (BLACKJACK, "My answer is: hit.", 1, "pattern"),
        (BLACKJACK, "Final decision = 0", 0, "pattern"),
        (BLACKJACK, "I would not hit here, I will stick.", 0, "mention"),
        (BLACKJACK, "Stick? No. Hit!", 1, "mention"),
        (
            CARTPOLE,
            "The pole leans left so push left, not push right... I choose push left",
            0,
            "mention",
        ),
        (CARTPOLE, "push right", 1, "exact"),
        (FROZEN, "Moving RIGHT is safest", 2, "mention"),
        (FROZEN, "action: up", 3, "pattern"),
    ],
)
def test_discrete_rules(parser: DiscreteParser, text: str, action: int, method: str) -> None:
    result = parser(text)
    assert (result.action, result.method, result.error) == (action, method, None)


def test_an_invalid_json_action_makes_the_reply_invalid() -> None:
    # The reply stated its action in JSON; guessing another one from the prose would be wrong.
    result = BLACKJACK('{"action": "double down"} ... fine, I hit')
    assert not result.valid and "JSON" in (result.error or "")


def test_names_inside_words_do_not_count() -> None:
    assert not BLACKJACK(
        "whitespace and sticker"
    ).valid  # "hit" in "whitespace", "stick" in "sticker"


@pytest.mark.parametrize(
    "text", ["", "   ", "double down", "5", "-1", "2.5", "{}", '{"action": 7}']
)
def test_discrete_invalid(text: str) -> None:
    result = BLACKJACK(text)
    assert result.action is None and not result.valid
    assert result.error and "stick, hit" in result.error


def test_discrete_with_start() -> None:
    parser = DiscreteParser(["-1", "0", "1"], start=-1)
    assert parser("-1").action == -1
    assert parser("Action: 1").action == 1


def test_box_parsing_and_clipping() -> None:
    parser = NumericParser(spaces.Box(-2, 2, (1,), dtype=np.float32))
    assert not parser("torque 1.5").valid  # a number somewhere is not a stated action
    result = NumericParser(parser.space, any_numbers=True)("torque 1.5")  # opted in
    assert result.valid and not result.clipped and np.allclose(result.action, [1.5])
    assert np.allclose(parser("1.5").action, [1.5])  # a reply of numbers only
    result = parser('{"action": [7]}')
    assert result.clipped and np.allclose(result.action, [2.0])
    assert result.action.dtype == np.float32
    assert not parser("no numbers here").valid
    assert not parser("nan").valid


def test_box_uses_last_numbers_and_action_statement() -> None:
    parser = NumericParser(spaces.Box(-1, 1, (2,)), any_numbers=True)
    assert np.allclose(parser("options 0.1 0.2 then 0.3, -0.4").action, [0.3, -0.4])
    assert np.allclose(parser("Action: 0.5 0.6\nbecause of 9 and 9").action, [0.5, 0.6])
    result = parser("only 0.3")
    assert not result.valid and result.error == "expected 2 number(s), found 1"


def test_multidiscrete_and_multibinary() -> None:
    md = NumericParser(spaces.MultiDiscrete([3, 5]))
    assert md("[2, 4]").action.tolist() == [2, 4]
    assert not md("[2, 5]").valid
    assert not md("1.5 2").valid
    mb = NumericParser(spaces.MultiBinary(3))
    assert mb("1 0 1").action.tolist() == [1, 0, 1]
    assert not mb("1 2 1").valid


PARSERS: list[DiscreteParser | NumericParser] = [
    BLACKJACK,
    CARTPOLE,
    DiscreteParser(["south", "north", "east", "west", "pickup", "dropoff"]),
    NumericParser(spaces.Box(-2, 2, (1,))),
    NumericParser(spaces.Box(-1, 1, (2, 2))),
    NumericParser(spaces.MultiDiscrete([3, 4])),
    NumericParser(spaces.MultiBinary(4)),
]


@settings(max_examples=300, deadline=None)
@given(text=st.text(), index=st.integers(0, len(PARSERS) - 1))
def test_parsers_never_raise(text: str, index: int) -> None:
    result = PARSERS[index](text)
    assert result.valid == (result.error is None)


@settings(max_examples=200, deadline=None)
@given(
    text=st.lists(
        st.sampled_from(
            ["{", "}", "[", "]", '"action"', ":", "1e999", "-", "nan", "hit", " ", "```"]
        ),
        max_size=40,
    ).map("".join)
)
def test_parsers_never_raise_on_json_like_junk(text: str) -> None:
    for parser in PARSERS:
        parser(text)
