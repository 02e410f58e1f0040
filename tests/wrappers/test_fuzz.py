"""Fuzzing the reply -> action path (issue 17, item 7): generated replies through every built-in
env's ``ActionParserWrapper`` and through the ``Agent``'s extraction. No reply may raise; each
one is either a valid action of the env or counted invalid (and then replaced by the declared
fallback), and the counters add up. ``make test`` runs a few hundred replies; the slow test
sends more than 10,000.
"""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gym_llm  # noqa: F401  (registers gym_llm/<Name>-v0)
from gym_llm import make_text_env
from gym_llm.wrappers import ActionParserWrapper
from gym_llm.wrappers.resolver import ActionResolver, rules_for

#: Every env with built-in text (gym_llm.wrappers.builtin_envs) and gym_llm's own with a parser.
ENV_IDS = [
    "Blackjack-v1",
    "FrozenLake-v1",
    "CliffWalking-v1",
    "Taxi-v4",
    "CartPole-v1",
    "MountainCar-v0",
    "MountainCarContinuous-v0",
    "Acrobot-v1",
    "Pendulum-v1",
    "gym_llm/GuessNumber-v0",
    "gym_llm/TextMaze-v0",
]
try:  # the minigrid extra (installed by make test)
    import minigrid  # noqa: F401

    ENV_IDS.append("BabyAI-GoToObj-v0")
except ImportError:
    pass

_WORDS = [
    "stick", "hit", "stand", "left", "right", "up", "down", "north", "south", "pickup",
    "dropoff", "push left", "push right", "accelerate", "higher", "lower", "Action:", "action",
    "I choose", "{", "}", "[", "]", '"action":', "null", "true", "-1", "0", "1", "2", "3", "4",
    "5", "3.14", "1e9", "nan", "inf", "-0.5", "2.0", "\n", "```json", "```",
]  # fmt: skip

#: Replies: structured fragments (names, numbers, JSON pieces) mixed with arbitrary text.
REPLIES = st.one_of(
    st.lists(st.sampled_from(_WORDS), max_size=12).map(" ".join),
    st.text(max_size=200),
    st.lists(st.one_of(st.sampled_from(_WORDS), st.text(max_size=8)), max_size=10).map("".join),
    st.dictionaries(
        st.sampled_from(["action", "Action", "move"]),
        st.one_of(
            st.integers(-5, 10),
            st.floats(allow_nan=True),
            st.text(max_size=10),
            st.booleans(),
            st.none(),
            st.lists(st.floats(-3, 3), max_size=3),
        ),
        max_size=2,
    ).map(json.dumps),
)


def _parser_wrapper(env: Any) -> ActionParserWrapper:
    level = env
    while not isinstance(level, ActionParserWrapper):
        level = level.env
    return level


class EnvFuzz:
    """One text env per id, stepped with each reply; checks every step and the counters."""

    def __init__(self) -> None:
        self.envs = {env_id: make_text_env(env_id, n_envs=1, seed=0) for env_id in ENV_IDS}
        for vec in self.envs.values():
            vec.reset()
        self.counts = dict.fromkeys(ENV_IDS, 0)
        self.invalid = dict.fromkeys(ENV_IDS, 0)

    def step(self, env_id: str, reply: str) -> None:
        vec = self.envs[env_id]
        wrapper = _parser_wrapper(vec.envs[0])
        _, _, _, infos = vec.step([reply])
        info = infos[0]
        valid = info["action_valid"]
        assert isinstance(valid, bool)
        assert wrapper.action_space is not None
        inner_space = wrapper.env.action_space
        assert inner_space.contains(info["action"]), (reply, info["action"])
        if valid:  # the parse is the action the env got
            parsed = wrapper.parse(reply)
            assert parsed.valid and inner_space.contains(parsed.action)
        self.counts[env_id] += 1
        self.invalid[env_id] += not valid

    def check_counters(self) -> None:
        for env_id, vec in self.envs.items():
            wrapper = _parser_wrapper(vec.envs[0])
            assert wrapper.total_steps == self.counts[env_id]
            assert wrapper.total_invalid == self.invalid[env_id]


def _agent_resolvers() -> list[ActionResolver]:
    """The Agent's reply -> action path with and without an action space, with an
    ``extract_action`` that raises on most replies (as LlamaGym users write it)."""

    def extract(reply: str) -> int:
        return {"stick": 0, "hit": 1}[reply.strip().lower()]

    space = gym.spaces.Discrete(2)
    with_space = ActionResolver(
        space,
        rules=rules_for(space, ["stick", "hit"]),
        extractor=extract,
        extractor_name="extract_action",
        recover=True,
    )
    without = ActionResolver(None, extractor=extract, extractor_name="extract_action")
    without.resolve("hit")  # one valid action seen: the no-space fallback has one to draw
    return [with_space, without]


def _fuzz(examples: int) -> tuple[EnvFuzz, int]:
    fuzz = EnvFuzz()
    resolvers = _agent_resolvers()
    agent_replies = {"n": 0, "fallback": 0}

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(REPLIES, st.sampled_from(ENV_IDS))
    def run(reply: str, env_id: str) -> None:
        fuzz.step(env_id, reply)
        for resolver in resolvers:
            outcome = resolver.resolve(reply)
            assert outcome.action in (0, 1)
            assert outcome.valid == (outcome.source != "fallback")
            agent_replies["n"] += 1
            agent_replies["fallback"] += not outcome.valid

    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the no-space fallback warns once
        run()
    fuzz.check_counters()
    assert agent_replies["n"] == 2 * sum(fuzz.counts.values())
    assert 0 < agent_replies["fallback"] < agent_replies["n"]
    return fuzz, sum(fuzz.counts.values())


def test_fuzz_replies_fast() -> None:
    fuzz, steps = _fuzz(300)
    assert steps == 300
    assert sum(fuzz.invalid.values()) > 0  # the generator does make garbage


@pytest.mark.slow
def test_fuzz_more_than_ten_thousand_replies() -> None:
    _, steps = _fuzz(10_500)
    assert steps == 10_500
