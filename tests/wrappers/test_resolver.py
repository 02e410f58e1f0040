"""The one reply -> action resolver: stages, the invalid-action policy, seeded fallbacks."""

from __future__ import annotations

import warnings

import gymnasium as gym
import pytest
from gymnasium import spaces

from gym_llm.wrappers import ActionParserWrapper
from gym_llm.wrappers.resolver import ActionResolver, rules_for

REPLIES = ["stick", 'I say {"action": "hit"}', "Action: stick", "hmm, hit", "zzz", "", "1"]


def _failing(reply: str) -> None:
    raise RuntimeError("no idea")


def test_wrapper_and_agent_style_resolvers_agree_on_every_reply() -> None:
    env = ActionParserWrapper(gym.make("Blackjack-v1"), fallback_action="stick")
    env.reset(seed=0)
    space = spaces.Discrete(2)
    agent_style = ActionResolver(
        space,
        rules=rules_for(space, ["stick", "hit"]),
        extractor=_failing,
        extractor_name="extract_action",
        recover=True,
        fallback_action=0,
    )
    for reply in REPLIES:
        info = env.step(reply)[4]
        outcome = agent_style.resolve(reply)
        assert outcome.action == info["action"], reply
        assert outcome.valid == info["action_valid"], reply
        assert outcome.error is not None and outcome.error.startswith("extract_action raised")
        env.reset(seed=0)


def test_extractor_first_then_rules_then_fallback_with_penalty() -> None:
    space = spaces.Discrete(3)
    resolver = ActionResolver(
        space,
        rules=rules_for(space, ["a", "b", "c"]),
        extractor=lambda r: 2 if r == "magic" else None,
        extractor_name="extract_action",
        recover=True,
        invalid_penalty=-1.0,
    )
    assert resolver.resolve("magic").source == "extract_action"
    recovered = resolver.resolve("Action: b")
    assert (recovered.action, recovered.source) == (1, "parser:pattern")
    assert recovered.error == "extract_action returned None"
    fallback = resolver.resolve("nothing here")
    assert fallback.source == "fallback" and fallback.penalty == -1.0 and not fallback.valid
    assert space.contains(fallback.action)


def test_seeded_fallbacks_repeat_and_out_of_space_extractions_are_invalid() -> None:
    space = spaces.Discrete(5)
    resolver = ActionResolver(space, extractor=lambda r: 7, extractor_name="extract_action")
    assert resolver.parse("x").error == "extract_action returned 7, not in Discrete(5)"
    resolver.seed(3)
    first = [resolver.resolve("x").action for _ in range(8)]
    resolver.seed(3)
    assert [resolver.resolve("x").action for _ in range(8)] == first


def test_raise_policy_and_nothing_to_fall_back_to() -> None:
    strict = ActionResolver(
        spaces.Discrete(2), rules=rules_for(spaces.Discrete(2)), on_invalid="raise", advice="Say 0."
    )
    with pytest.raises(ValueError, match=r"Invalid action for reply 'zzz'.*Say 0"):
        strict.resolve("zzz")
    blind = ActionResolver(None, extractor=lambda r: None, extractor_name="extract_action")
    with pytest.raises(ValueError, match="nothing to fall back to"):
        blind.resolve("zzz")
    with pytest.raises(ValueError, match="on_invalid"):
        ActionResolver(None, on_invalid="ignore")
    with pytest.raises(ValueError, match="fallback_action 9"):
        ActionResolver(spaces.Discrete(2), fallback_action=9)


def test_contains_never_raises_on_a_wrong_type() -> None:
    resolver = ActionResolver(spaces.Box(0, 1, (2,)))
    assert not resolver.contains("a string")
    assert not resolver.contains(None)


def test_no_space_falls_back_among_actions_seen_valid() -> None:
    """Item 8 of issue 17: the LlamaGym loop (no action space) survives a raising extractor."""

    def extract(reply: str) -> int:
        return int(reply)  # raises on anything but a number

    resolver = ActionResolver(None, extractor=extract, extractor_name="extract_action")
    resolver.invalid_penalty = -1.0
    with pytest.raises(ValueError, match="before any valid one"):
        resolver.resolve("hit")  # nothing seen yet: nothing to fall back to
    assert resolver.resolve("0").action == 0 and resolver.resolve("1").action == 1
    assert resolver.resolve("1").source == "extract_action"
    with pytest.warns(RuntimeWarning, match="2 actions seen valid so far"):
        first = resolver.resolve("hit")
    assert first.source == "fallback" and first.action in (0, 1) and first.penalty == -1.0
    assert "extract_action raised ValueError" in (first.error or "")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once only
        drawn = {resolver.resolve("stay").action for _ in range(40)}
    assert drawn == {0, 1}
    strict = ActionResolver(None, extractor=extract, on_invalid="raise")
    strict.resolve("1")
    with pytest.raises(ValueError, match="Invalid action"):
        strict.resolve("hit")
