"""``gym_llm/GuessNumber-v0``: API conformance, seeding, text, parsing, and exact values that
agree with simulated play."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import gym_llm
from gym_llm.envs import DescribesItself
from gym_llm.envs.guess_number import GuessNumberEnv
from gym_llm.evaluation.exact import (
    TabularModel,
    exact_evaluation_supported,
    exact_optimum,
    exact_policy_value,
    exact_random_value,
)
from gym_llm.wrappers import ActionParserWrapper, TextObservationWrapper

ENV_ID = "gym_llm/GuessNumber-v0"


def _wrapped(**kwargs: Any) -> ActionParserWrapper:
    return ActionParserWrapper(TextObservationWrapper(gym.make(ENV_ID, **kwargs)))


def test_registered_and_checked_by_gymnasium_and_sb3() -> None:
    env = gym.make(ENV_ID)
    assert isinstance(env.unwrapped, GuessNumberEnv)
    assert isinstance(env.unwrapped, DescribesItself)
    check_env(env.unwrapped)
    sb3_check_env(GuessNumberEnv(), warn=True)
    check_env(_wrapped())


def test_seeded_episodes_repeat() -> None:
    def play(seed: int) -> list[Any]:
        env = GuessNumberEnv()
        obs, _ = env.reset(seed=seed)
        trace: list[Any] = [int(obs)]
        done = False
        while not done:
            obs, reward, done, _, info = env.step(env.reference_action())
            trace += [int(obs), reward, info["feedback"]]
        return trace

    assert play(3) == play(3)
    secrets = set()
    for seed in range(40):
        env = GuessNumberEnv()
        env.reset(seed=seed)
        secrets.add(env._secret)
    assert len(secrets) > 8  # seeds give different secrets


def test_feedback_narrows_the_interval_and_text_says_so() -> None:
    env = GuessNumberEnv()
    env.reset(seed=0)
    env._secret = 11
    obs, reward, done, _, info = env.step(7)  # guess 8
    assert (reward, done, info["feedback"]) == (-0.1, False, "higher")
    assert env.states[int(obs)] == (9, 16, 5)
    assert (
        env.describe(obs)
        == "The number is higher than 8, so it is one of 9 to 16. You have 5 guesses left."
    )
    obs, reward, done, _, info = env.step(11)  # guess 12
    assert info["feedback"] == "lower" and env.states[int(obs)] == (9, 11, 4)
    assert "higher than 8 and lower than 12" in env.describe(obs)
    obs, reward, done, _, info = env.step(0)  # guess 1: outside, wastes a guess
    assert env.states[int(obs)] == (9, 11, 3) and reward == -0.1
    obs, reward, done, _, info = env.step(10)  # guess 11
    assert (reward, done, info["feedback"], info["secret"]) == (1.0, True, "correct", 11)
    assert int(obs) == env.terminal_state
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)


def test_running_out_of_guesses_ends_the_game() -> None:
    env = GuessNumberEnv(max_guesses=2)
    env.reset(seed=0)
    env._secret = 5
    _, _, done, _, _ = env.step(0)
    assert not done
    obs, reward, done, _, info = env.step(0)
    assert done and reward == -0.1 and info["secret"] == 5 and int(obs) == env.terminal_state


def test_numeric_action_names_parse_as_names() -> None:
    env = _wrapped()
    assert env.action_space.actions == tuple(str(g) for g in range(1, 17))
    results = []
    for reply in ("3", '"3"', '{"action": 3}', '{"action": "3"}', "Answer: 3", "I guess 3."):
        env.reset(seed=0)
        _, _, _, _, info = env.step(reply)
        results.append((info["action"], info["action_valid"], info["guess"]))
    assert results == [(2, True, 3)] * 6
    env.reset(seed=0)
    _, _, _, _, info = env.step("17")
    assert not info["action_valid"]


def test_text_env_from_make_text_env() -> None:
    vec = gym_llm.make_text_env(ENV_ID, n_envs=2, seed=0)
    obs: Any = vec.reset()
    assert obs[0] == "The number is between 1 and 16. You have 6 guesses left."
    assert "1 to 16" in vec.observation_space.instruction
    assert vec.action_space.actions[0] == "1"
    _, _, _, infos = vec.step(np.array(["8", '{"action": 8}'], dtype=object))
    assert all(info["guess"] == 8 for info in infos)


def _simulate(policy: Callable[[GuessNumberEnv], int], episodes: int, **kwargs: Any) -> np.ndarray:
    env = GuessNumberEnv(**kwargs)
    returns = np.zeros(episodes)
    for episode in range(episodes):
        env.reset(seed=episode)
        done = False
        while not done:
            _, reward, done, _, _ = env.step(policy(env))
            returns[episode] += reward
    return returns


def _table(env: GuessNumberEnv, policy: Callable[[GuessNumberEnv], int]) -> np.ndarray:
    table = np.zeros((env.observation_space.n, env.action_space.n))
    for state in range(len(env.states)):
        env._state = state
        table[state, policy(env)] = 1.0
    table[env.terminal_state, 0] = 1.0
    return table


def _lowest(env: GuessNumberEnv) -> int:
    return env.states[env._state][0] - 1  # guess the lowest possible number


@pytest.mark.parametrize(
    "name, policy",
    [
        ("reference", GuessNumberEnv.reference_action),
        ("lowest", _lowest),
        ("random", None),
    ],
)
def test_exact_values_match_simulation(name: str, policy: Any) -> None:
    env = GuessNumberEnv()
    model = TabularModel.of(env)
    if policy is None:
        rng = np.random.default_rng(0)
        exact = model.value(np.full(model.reward.shape, 1 / 16))
        returns = _simulate(lambda e: int(rng.integers(16)), 4000)
    else:
        exact = model.value(_table(env, policy))
        returns = _simulate(policy, 4000)
    sem = max(returns.std() / np.sqrt(len(returns)), 1e-9)
    assert abs(returns.mean() - exact) < 4 * sem + 1e-9, (name, exact, returns.mean())


def _binary_search_wrong_guesses(low: int, high: int, depth: int = 0) -> int:
    """Total wrong guesses over all secrets in ``low..high`` when guessing the lower middle."""
    if low > high:
        return 0
    middle = (low + high) // 2
    return (
        depth * 1
        + _binary_search_wrong_guesses(low, middle - 1, depth + 1)
        + (_binary_search_wrong_guesses(middle + 1, high, depth + 1))
    )


def test_optimum_and_random_in_closed_form() -> None:
    wrong = _binary_search_wrong_guesses(1, 16) / 16  # binary search never needs a 6th guess
    assert wrong == pytest.approx(2.375)
    assert exact_optimum(ENV_ID) == pytest.approx(1 - 0.1 * wrong, abs=1e-12)  # 0.7625
    miss = 15 / 16  # random guesses hit with probability 1/16 each, independently
    random = (1 - miss**6) - 0.1 * sum(miss**k for k in range(1, 7))
    assert exact_random_value(ENV_ID) == pytest.approx(random, abs=1e-12)  # -0.1605
    assert GuessNumberEnv().optimal_return == pytest.approx(0.7625)


@pytest.mark.parametrize("kwargs", [{}, {"max_number": 10, "max_guesses": 3, "guess_cost": 0.3}])
def test_reference_action_is_optimal(kwargs: dict[str, Any]) -> None:
    env = GuessNumberEnv(**kwargs)
    model = TabularModel.of(env)
    assert model.value(_table(env, GuessNumberEnv.reference_action)) == pytest.approx(
        model.optimum(), abs=1e-12
    )
    env.reset(seed=0)
    middle = (1 + env.max_number) // 2  # the lower middle of 1..max_number
    assert env.reference_action() == middle - 1
    assert exact_evaluation_supported(ENV_ID, kwargs)


class _ReplyingAgent:
    """Replies from the text alone, as an LLM would; counts the questions."""

    def __init__(self, reply: Callable[[GuessNumberEnv, int], str]) -> None:
        self.env = GuessNumberEnv()
        self.state_of_text = {self.env.describe(s): s for s in range(self.env.observation_space.n)}
        self.reply, self.asked = reply, 0

    def predict(self, observations: list[str], deterministic: bool = True) -> tuple[Any, None]:
        self.asked += len(observations)
        return [self.reply(self.env, self.state_of_text[o]) for o in observations], None


def _reference_reply(env: GuessNumberEnv, state: int) -> str:
    env._state = state
    return f"My guess: {env.reference_action() + 1}"


def test_exact_policy_value_asks_only_reachable_states() -> None:
    agent = _ReplyingAgent(_reference_reply)
    assert exact_policy_value(agent, ENV_ID) == pytest.approx(0.7625, abs=1e-12)
    # the binary-search tree over 16 numbers (1 + 2 + 4 + 8 + 1 intervals), not all 817 states
    assert agent.asked == 16
    garbage = _ReplyingAgent(lambda env, state: "no idea")  # invalid -> random guesses
    assert exact_policy_value(garbage, ENV_ID) == pytest.approx(exact_random_value(ENV_ID))


def test_bad_arguments_are_refused() -> None:
    for kwargs in ({"max_number": 1}, {"max_guesses": 0}, {"guess_cost": -1}):
        with pytest.raises(ValueError):
            GuessNumberEnv(**kwargs)
    with pytest.raises(ValueError, match="not a state"):
        GuessNumberEnv().state_of(5, 3, 1)
