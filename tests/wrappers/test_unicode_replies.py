"""Replies with Unicode look-alikes (``fırst``, ``ſecond``, ``HİT``, full-width letters, zero-width
spaces, soft hyphens) and arbitrary text: every parser path is total, and a look-alike of an action
name means that action. One reply must never end a run."""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gym_llm  # noqa: F401  (registers gym_llm/<Name>-v0)
from gym_llm import make_text_env
from gym_llm.envs.text_game import TextGameEnv
from gym_llm.text import fold
from gym_llm.wrappers import ActionParserWrapper, DiscreteParser, NumericParser, ParseResult
from gym_llm.wrappers.resolver import ActionResolver, rules_for

#: Action sets of the kinds the envs use: words, directions, several words, numbers, non-ASCII.
NAME_SETS = [
    ("first", "second"),
    ("stick", "hit"),
    ("north", "south", "east", "west"),
    ("left", "right", "forward", "pick up", "toggle"),
    ("1", "2", "3", "16"),
    ("café", "naïve", "straße"),
]
#: Look-alikes Python's re.IGNORECASE matches against ASCII letters, and invisible characters.
LOOKALIKES = {"i": ["ı", "İ", "i\u0307"], "s": ["ſ"], "k": ["\u212a"], "I": ["İ"], "S": ["ſ"]}
INVISIBLE = ["\u200b", "\u200c", "\u200d", "\u00ad", "\u2060", "\ufeff", "\u200e"]


def _disguised(name: str, draw: Any) -> str:
    """``name`` with some letters swapped for look-alikes, cased at random, maybe full-width,
    maybe with an invisible character inside."""
    out = []
    for c in name:
        c = draw(st.sampled_from([c, c.upper() if len(c.upper()) == 1 else c]))
        if c in LOOKALIKES and draw(st.booleans()):
            c = draw(st.sampled_from(LOOKALIKES[c]))
        elif c.isascii() and c.isalpha() and draw(st.integers(0, 5)) == 0:
            c = chr(ord(c) - 0x21 + 0xFF01)  # full-width
        out.append(c)
    if len(out) > 1 and draw(st.booleans()):
        out.insert(draw(st.integers(1, len(out) - 1)), draw(st.sampled_from(INVISIBLE)))
    return "".join(out)


@st.composite
def disguised_names(draw: Any) -> tuple[tuple[str, ...], int, str]:
    names = draw(st.sampled_from(NAME_SETS))
    index = draw(st.integers(0, len(names) - 1))
    return names, index, _disguised(names[index], draw)


def test_fold_makes_lookalikes_ascii_and_is_idempotent() -> None:
    assert [fold(s) for s in ("fırst", "ſecond", "rİght", "HİT", "stıck", "eaſt")] == [
        "first",
        "second",
        "right",
        "hit",
        "stick",
        "east",
    ]
    assert fold("fi\u0307rst") == fold("ｆｉｒｓｔ") == fold("fi\u200brst") == "first"
    assert fold("le\u00adft") == "left" and fold("Café") == "café"


@settings(max_examples=500, deadline=None)
@given(st.text())
def test_fold_is_idempotent_on_any_text(text: str) -> None:
    assert fold(fold(text)) == fold(text)


@settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
@given(disguised_names(), st.sampled_from(["{}", "I pick {}.", "Action: {}", '{{"action": "{}"}}']))
def test_a_lookalike_of_a_name_is_that_action(
    case: tuple[tuple[str, ...], int, str], template: str
) -> None:
    names, index, reply = case
    result = DiscreteParser(names)(template.format(reply))
    assert result.action == index, (reply, result)


TEXT = st.one_of(
    st.text(max_size=300),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=60),
    st.lists(
        st.one_of(st.sampled_from([n for s in NAME_SETS for n in s]), st.text(max_size=4)),
        max_size=12,
    ).map(" ".join),
    st.integers(1, 5).map(lambda n: "Action: hit " * 2_000 * n),  # long replies
)


def _check(result: ParseResult, space: spaces.Space[Any]) -> None:
    assert isinstance(result, ParseResult)
    assert result.valid == (result.error is None)
    if result.valid:
        assert space.contains(result.action), result


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(TEXT)
def test_every_parser_is_total_on_any_text(text: str) -> None:
    for names in NAME_SETS:
        space = spaces.Discrete(len(names))
        _check(DiscreteParser(names)(text), space)
        _check(DiscreteParser(names, aliases={names[0]: ["ſtay", "İt"]})(text), space)
    for numeric in (
        spaces.Box(-1, 1, (2,)),
        spaces.MultiDiscrete([3, 4]),
        spaces.MultiBinary(3),
    ):
        _check(NumericParser(numeric)(text), numeric)
        _check(NumericParser(numeric, any_numbers=True)(text), numeric)


class _Game:
    """A text game that accepts any move and ends after three."""

    def reset(self, seed: int | None = None) -> str:
        self.turns = 0
        return "Say something."

    def step(self, text: str) -> tuple[str, float, bool]:
        self.turns += 1
        return f"You said {len(text)} characters.", 0.0, self.turns >= 3


ENVS = {
    "Blackjack-v1": lambda: make_text_env("Blackjack-v1", seed=0),
    "TextMaze": lambda: make_text_env("gym_llm/TextMaze-v0", seed=0),
    "GuessNumber": lambda: make_text_env("gym_llm/GuessNumber-v0", seed=0),
    "Pendulum": lambda: make_text_env("Pendulum-v1", seed=0),
    "TextGameEnv": lambda: make_text_env(lambda: TextGameEnv(_Game()), seed=0),
}


def _resolvers() -> list[ActionResolver]:
    """The Agent's path (``extract_action``, then the rules): a strict extractor that raises on
    most replies, as LlamaGym users write it."""

    def extract(reply: str) -> int:
        return {"stick": 0, "hit": 1}[reply.strip().lower()]

    space = gym.spaces.Discrete(2)
    return [
        ActionResolver(
            space,
            rules=rules_for(space, ["stick", "hit"]),
            extractor=extract,
            extractor_name="extract_action",
            recover=True,
        )
    ]


def test_wrappers_envs_and_the_agent_path_survive_any_reply() -> None:
    envs = {name: make() for name, make in ENVS.items()}
    for vec in envs.values():
        vec.reset()
    resolvers = _resolvers()

    @settings(max_examples=300, deadline=None, derandomize=True)
    @given(st.one_of(TEXT, disguised_names().map(lambda c: c[2])), st.sampled_from(sorted(envs)))
    def run(reply: str, name: str) -> None:
        _, _, _, infos = envs[name].step(np.array([reply], dtype=object))
        assert isinstance(infos[0]["action_valid"], bool)
        for resolver in resolvers:
            assert resolver.resolve(reply).action in (0, 1)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        run()


def test_the_replies_that_crashed_a_run_are_actions_now() -> None:
    env = ActionParserWrapper(gym.make("Blackjack-v1", sab=False))
    env.reset(seed=0)
    for reply, action in [("stıck", 0), ("HİT", 1), ("I will ſtick", 0)]:
        *_, info = env.step(reply)
        assert info["action_valid"] and info["action"] == action, (reply, info)
        env.reset(seed=0)


class _Fragile:
    """A user's game that breaks on a reply it did not expect."""

    def reset(self, seed: int | None = None) -> str:
        return "Pick a colour."

    def step(self, text: str) -> tuple[str, float, bool]:
        return {"red": ("ok", 1.0, True)}[text]


def test_an_env_that_raises_is_named_with_the_reply() -> None:
    import pytest

    from gym_llm.rl.common.vec_env import EnvStepError

    vec = make_text_env(lambda: TextGameEnv(_Fragile()), seed=0)
    vec.reset()
    with pytest.raises(EnvStepError, match=r"env 0 \(TextGameEnv\) raised KeyError.*'blue'") as err:
        vec.step(np.array(["blue"], dtype=object))
    assert isinstance(err.value.__cause__, KeyError)  # the env's own traceback is kept
