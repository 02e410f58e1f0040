"""Reply patterns: the character automaton agrees with ``re.fullmatch``, the token masks keep
every reply a match, and a policy decodes only matches with exact log-probs."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import gym_llm.policy.grammar
from gym_llm import LLMPolicy
from gym_llm.policy.grammar import CharAutomaton, PatternAutomaton, PatternError
from gym_llm.spaces import TextActions, TextObservations
from tests.models import tiny_model_fixture

PATTERNS = [
    r"[1-9]\d?|100",
    r"[a-z]{5}",
    r"\\boxed\{\d{1,2}\}",
    r"(north|south)( then (east|west))?",
    r"[^ab]+c*?",
    r"x.y\s\w\W\D\S",
]

model_dir = tiny_model_fixture("model_dir", ["north", "south", "east", "west"])


def test_docstring_examples() -> None:
    assert doctest.testmod(gym_llm.policy.grammar).failed == 0


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


def _policy(model_dir: Path, space: TextActions, **kwargs: object) -> LLMPolicy:
    return LLMPolicy(
        TextObservations(64),
        space,
        lambda _: 1e-3,
        model=str(model_dir),
        device="cpu",
        action_mode="generate",
        lora={"r": 4},
        max_new_tokens=6,
        temperature=3.0,
        **kwargs,
    )


@pytest.mark.parametrize(
    ("declared", "pattern"),
    [
        ("env", "(north|south) (east|west)"),
        ("user", "(north|south) (east|west)"),
        ("env", "[a-z]{5}"),  # a Wordle-like guess: any word of five letters
        ("user", "[1-9][0-9]?|100"),  # a number in 1-100, GuessNumber-like
    ],
)
def test_a_policy_writes_only_matches_and_the_update_applies_the_same_mask(
    model_dir: Path, declared: str, pattern: str
) -> None:
    if declared == "env":
        policy = _policy(model_dir, TextActions(pattern=pattern))
    else:
        policy = _policy(model_dir, TextActions(), reply_pattern=pattern)
    assert policy.reply_constraint == "pattern"
    observations = ["Where now?", "The door is north.", "Where now?"] * 3
    torch.manual_seed(0)
    with torch.no_grad():
        step = policy.act(observations)
        greedy = policy.act(observations, deterministic=True)
    for reply in [*step.replies, *greedy.replies]:
        assert re.fullmatch(pattern, str(reply)), reply
    policy.set_training_mode(True)
    again = policy.evaluate_actions(observations, step.actions, step.states)
    for i, stored in enumerate(step.token_log_probs):  # invariant 1 under the pattern's mask
        got = again.token_log_probs[i][again.mask[i]].detach().numpy()
        np.testing.assert_allclose(got, stored, atol=1e-5)


def test_free_text_stays_free_without_a_pattern(model_dir: Path) -> None:
    assert _policy(model_dir, TextActions()).reply_constraint == "off"
    with pytest.raises(ValueError, match="needs a pattern"):
        _policy(model_dir, TextActions(), reply_constraint="pattern")


def test_a_pattern_the_user_gives_wins_over_the_env_list(model_dir: Path) -> None:
    listed = TextActions(["north", "south"])
    assert _policy(model_dir, listed).reply_constraint == "action"
    think = _policy(model_dir, listed, reply_pattern="(east |west )?(north|south)")
    assert think.reply_constraint == "pattern" and think.action_head is None
    with torch.no_grad():
        step = think.act(["Where now?"] * 4)
    assert all(re.fullmatch("(east |west )?(north|south)", str(r)) for r in step.replies)
