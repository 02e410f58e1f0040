"""``gym_llm/KeywordBandit-v0``: registration, API conformance, rewards, parsing, seeding."""

from __future__ import annotations

import importlib

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import gym_llm
from gym_llm.envs.keyword_bandit import KeywordBanditEnv
from gym_llm.spaces import TextActions, TextObservations
from gym_llm.wrappers import ActionParserWrapper

ENV_ID = "gym_llm/KeywordBandit-v0"


def _other(env: KeywordBanditEnv, target: str) -> str:
    return next(w for w in env.options if w != target)


def test_make_after_import_gym_llm() -> None:
    assert gym_llm.envs is not None  # `import gym_llm` alone registers the id
    env = gym.make(ENV_ID)
    assert isinstance(env.unwrapped, KeywordBanditEnv)
    assert isinstance(env.observation_space, TextObservations)
    assert isinstance(env.action_space, TextActions)
    assert env.action_space.actions == ("apple", "banana", "cherry", "grape")
    assert env.observation_space.instruction
    assert env.action_space.description is not None
    assert "'cherry'" in env.action_space.description
    text, info = env.reset(seed=0)
    assert isinstance(text, str) and info["target"] in text
    env.close()


def test_registration_survives_reimport() -> None:
    importlib.reload(gym_llm.envs)
    assert ENV_ID in gym.registry


def test_make_with_options_kwarg() -> None:
    env = gym.make(ENV_ID, options=["red", "blue"])
    assert env.action_space.actions == ("red", "blue")
    assert env.unwrapped.random_return == 0.5


def test_check_env_passes() -> None:
    check_env(gym.make(ENV_ID).unwrapped, skip_render_check=True)
    check_env(KeywordBanditEnv(options=("yes", "no"), render_mode="ansi"), skip_render_check=True)


def test_target_in_observation_and_drawn_from_options() -> None:
    env = KeywordBanditEnv()
    seen = set()
    for seed in range(40):
        text, info = env.reset(seed=seed)
        target = info["target"]
        assert target in env.options
        assert text == f"Options: apple, banana, cherry, grape. Target: {target}."
        assert env.observation_space.contains(text)
        seen.add(target)
    assert seen == set(env.options)  # uniform over 4 options: all appear in 40 draws


@pytest.mark.parametrize(
    "reply",
    ["{target}", " {target}. ", "{TARGET}", '{{"action": "{target}"}}', "Answer: {target}"],
)
def test_target_reply_earns_one(reply: str) -> None:
    env = KeywordBanditEnv()
    _, info = env.reset(seed=3)
    target = info["target"]
    text = reply.format(target=target, TARGET=target.upper())
    obs, reward, terminated, truncated, info = env.step(text)
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["action_valid"] is True
    assert info["action"] == env.options.index(target)
    assert info["action_text"] == text
    assert info["invalid_actions"] == 0
    assert info["parse_error"] is None
    assert env.observation_space.contains(obs)


def test_other_option_earns_zero_but_is_valid() -> None:
    env = KeywordBanditEnv()
    _, info = env.reset(seed=5)
    other = _other(env, info["target"])
    _, reward, terminated, _, info = env.step(other)
    assert reward == 0.0 and terminated
    assert info["action_valid"] is True
    assert info["action"] == env.options.index(other)
    assert info["parse_method"] == "exact"
    assert info["invalid_actions"] == 0


@pytest.mark.parametrize("junk", ["", "   ", "I don't know", "pineapple", "{}", "💥"])
def test_junk_reply_is_invalid_and_earns_zero(junk: str) -> None:
    env = KeywordBanditEnv()
    env.reset(seed=1)
    _, reward, terminated, truncated, info = env.step(junk)
    assert (reward, terminated, truncated) == (0.0, True, False)
    assert info["action_valid"] is False
    assert info["action"] is None
    assert info["invalid_actions"] == 1
    assert info["parse_method"] is None
    assert "apple" in info["parse_error"]


def test_info_keys_match_action_parser_wrapper() -> None:
    wrapped = ActionParserWrapper(gym.make("Blackjack-v1", sab=False))
    wrapped.reset(seed=0)
    *_, wrapper_info = wrapped.step("stick")
    env = KeywordBanditEnv()
    env.reset(seed=0)
    *_, info = env.step("apple")
    assert set(info) == set(wrapper_info) | {"target"}  # Blackjack's own info is empty


def test_seeding_is_reproducible() -> None:
    env_a, env_b = KeywordBanditEnv(), KeywordBanditEnv()
    targets_a = [env_a.reset(seed=s)[1]["target"] for s in range(20)]
    targets_b = [env_b.reset(seed=s)[1]["target"] for s in range(20)]
    assert targets_a == targets_b
    env_a.reset(seed=7)
    env_b.reset(seed=7)
    unseeded_a = [env_a.reset()[1]["target"] for _ in range(20)]
    unseeded_b = [env_b.reset()[1]["target"] for _ in range(20)]
    assert unseeded_a == unseeded_b
    assert len(set(targets_a)) > 1  # the seed matters


def test_returns_reference_values() -> None:
    assert KeywordBanditEnv.optimal_return == 1.0
    assert KeywordBanditEnv().random_return == 0.25
    assert KeywordBanditEnv(options=("a", "b", "c")).random_return == pytest.approx(1 / 3)


def test_random_policy_matches_random_return() -> None:
    env = KeywordBanditEnv()
    env.action_space.seed(0)
    total = 0.0
    episodes = 2000
    for seed in range(episodes):
        env.reset(seed=seed)
        total += env.step(env.action_space.sample())[1]
    assert total / episodes == pytest.approx(env.random_return, abs=0.04)


@pytest.mark.parametrize(
    "options",
    [
        (),
        ("apple",),
        ("apple", "apple"),
        ("Apple", "banana"),
        ("green apple", "banana"),
        ("apple", ""),
        ("apple", "banana!"),
        ("apple", 3),
        "apple",
    ],
)
def test_bad_options_rejected(options: object) -> None:
    with pytest.raises(ValueError, match="options"):
        KeywordBanditEnv(options=options)


def test_non_str_action_raises_type_error() -> None:
    env = KeywordBanditEnv()
    env.reset(seed=0)
    with pytest.raises(TypeError, match="reply as str"):
        env.step(0)


def test_step_without_running_episode_raises() -> None:
    env = KeywordBanditEnv()
    with pytest.raises(RuntimeError, match="reset"):
        env.step("apple")
    env.reset(seed=0)
    env.step("apple")
    with pytest.raises(RuntimeError, match="reset"):
        env.step("apple")


def test_render_ansi() -> None:
    env = KeywordBanditEnv(render_mode="ansi")
    text, info = env.reset(seed=0)
    assert env.render() == text
    env.step(info["target"])
    rendered = env.render()
    assert rendered is not None and "reward 1" in rendered
    with pytest.raises(ValueError, match="render_mode"):
        KeywordBanditEnv(render_mode="human")


def test_observation_for_and_score_match_what_step_pays() -> None:
    env = KeywordBanditEnv()
    obs, info = env.reset(seed=3)
    assert env.observation_for(info["target"]) == obs
    for reply in ("apple", "I pick grape.", "???", '{"action": "cherry"}'):
        env.reset(seed=3)
        _, reward, *_ = env.step(reply)
        assert env.score(reply, info["target"]) == reward
    with pytest.raises(ValueError, match="target must be one of"):
        env.observation_for("kiwi")
