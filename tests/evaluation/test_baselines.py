"""Classic baselines: one-hot observations, the env-step budget, exact scores vs simulation."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from gym_llm.evaluation.baselines import (
    OneHotObservation,
    build_sb3,
    exact_score,
    make_flat_env,
    monte_carlo_score,
    ppo_rollout,
    random_score,
    sb3_action_table,
    score_sb3,
    success_probability,
    train_sb3,
)
from gym_llm.evaluation.exact import exact_random_value

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_blackjack_tuple_becomes_concatenated_one_hots() -> None:
    env = OneHotObservation(gym.make("Blackjack-v1", sab=False))
    assert env.observation_space.shape == (32 + 11 + 2,)
    vector = env.observation((14, 10, 1))
    assert vector.dtype == np.float32
    assert np.flatnonzero(vector).tolist() == [14, 32 + 10, 32 + 11 + 1]
    obs, _ = env.reset(seed=0)
    assert obs.shape == (45,) and obs.sum() == 3.0


def test_discrete_becomes_one_hot_and_box_passes_through() -> None:
    lake = make_flat_env("FrozenLake-v1", {"is_slippery": False}, seed=0)
    assert lake.observation_space.shape == (16,)
    assert np.flatnonzero(lake.observation(5)).tolist() == [5]
    cart = make_flat_env("CartPole-v1", seed=0)
    obs, _ = cart.reset(seed=1)
    raw, _ = gym.make("CartPole-v1").reset(seed=1)
    np.testing.assert_allclose(obs, raw)


class _StepCounter(gym.Wrapper[Any, Any, Any, Any]):
    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        self.steps = 0

    def step(self, action: Any) -> Any:
        self.steps += 1
        return self.env.step(action)


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
@pytest.mark.parametrize("budget", [100, 130])
def test_sb3_never_collects_more_than_the_budget(algo: str, budget: int) -> None:
    env = _StepCounter(make_flat_env("FrozenLake-v1", {"is_slippery": True}, seed=0))
    model, total = build_sb3(algo, env, budget, seed=0)
    model.learn(total)
    assert env.steps <= budget
    assert env.steps >= budget - 3  # and uses (nearly) all of it (DQN: whole train_freq)
    assert model.num_timesteps == env.steps


def test_ppo_rollout_splits_large_budgets_into_whole_rollouts() -> None:
    for budget in (2, 128, 2048, 5000, 10_000, 20_001):
        n_steps, total = ppo_rollout(budget)
        assert total <= budget and total % n_steps == 0 and n_steps <= 2048
        assert total > budget - (budget // 2048 + 1)  # loses less than a step per rollout
    with pytest.raises(ValueError, match="at least 2"):
        ppo_rollout(1)


def test_train_sb3_curve_ends_at_the_steps_taken() -> None:
    result = train_sb3("ppo", "FrozenLake-v1", {"is_slippery": False}, 96, seed=0)
    assert result.env_steps <= 96
    assert result.curve[0].timesteps == 0
    assert result.curve[-1].timesteps == result.env_steps
    assert result.final.kind == "exact" and result.train_wall_s >= 0


def test_exact_sb3_score_matches_a_long_monte_carlo_run() -> None:
    env = make_flat_env("Blackjack-v1", {"sab": False}, seed=3)
    model, _ = build_sb3("ppo", env, 64, seed=3)  # untrained: some fixed greedy policy
    exact = exact_score(
        "Blackjack-v1", {"sab": False}, sb3_action_table(model, "Blackjack-v1", {"sab": False})
    )
    mc = monte_carlo_score(model, "Blackjack-v1", {"sab": False}, episodes=4000, seed=7)
    assert exact.kind == "exact" and mc.kind == "mc" and mc.episodes == 4000
    assert abs(exact.value - mc.value) < 4 * mc.sem, (exact, mc)


def test_exact_tabular_sb3_score_matches_monte_carlo_on_slippery_frozenlake() -> None:
    env = make_flat_env("FrozenLake-v1", {"is_slippery": True}, seed=0)
    model, _ = build_sb3("dqn", env, 64, seed=1)
    exact = score_sb3(model, "FrozenLake-v1", {"is_slippery": True}, episodes=0)
    mc = monte_carlo_score(model, "FrozenLake-v1", {"is_slippery": True}, episodes=1500, seed=2)
    assert exact.kind == "exact"
    assert exact.success == pytest.approx(exact.value)  # the only reward is the goal's
    assert abs(exact.value - mc.value) < 4 * max(mc.sem, 1e-3), (exact, mc)


def _cliff_policy(route: bool) -> np.ndarray:
    """CliffWalking: 'up, right x11, down' along the row above the cliff, or always 'up'."""
    policy = np.zeros((48, 4))
    policy[:, 0] = 1.0  # up
    if route:
        policy[24:35] = [0, 1, 0, 0]  # row 2, columns 0-10: right
        policy[35] = [0, 0, 1, 0]  # row 2, column 11: down to the goal
    return policy


def test_an_answer_that_ends_the_episode_in_place_can_succeed() -> None:
    # The task family's one-step questions end where they start, paying 1 for the right answer:
    # not the toy-text "already over" self-loop (same reward whatever the move).
    env = gym.make("gym_llm/Family-v0", task="threshold-p0-s0")
    unwrapped: Any = env.unwrapped
    n, k = len(unwrapped.P), unwrapped.n_actions
    right = np.zeros((n, k))
    for s in range(n):
        right[s, max(range(k), key=lambda a: unwrapped.P[s][a][0][2])] = 1.0
    assert success_probability(env, right) == pytest.approx(1.0)
    assert success_probability(env, np.full((n, k), 1 / k)) == pytest.approx(0.5)
    assert success_probability(env, 1.0 - right) == pytest.approx(0.0)


def test_success_probability_separates_reaching_the_goal_from_avoiding_the_cliff() -> None:
    env = gym.make("CliffWalking-v1", max_episode_steps=100)
    assert success_probability(env, _cliff_policy(route=True)) == pytest.approx(1.0)
    assert success_probability(env, _cliff_policy(route=False)) == pytest.approx(0.0)
    value = exact_score(
        "CliffWalking-v1", {"max_episode_steps": 100}, lambda s: _cliff_policy(False)
    )
    assert value.value == pytest.approx(-100.0) and value.success == pytest.approx(0.0)


def test_random_score_is_exact_where_possible_else_monte_carlo() -> None:
    exact = random_score("Taxi-v4", {})
    assert exact.kind == "exact" and exact.value == pytest.approx(exact_random_value("Taxi-v4"))
    mc = random_score("CartPole-v1", {}, episodes=200)
    assert mc.kind == "mc" and mc.episodes == 200 and 15 < mc.value < 30 and mc.success is None


def test_bad_algorithm_and_env_errors_say_what_to_do() -> None:
    with pytest.raises(ValueError, match="'ppo' or 'dqn'"):
        build_sb3("a2c", make_flat_env("CartPole-v1"), 64, 0)
    with pytest.raises(ValueError, match="monte_carlo_score"):
        exact_score("CartPole-v1", {}, lambda s: np.zeros((len(s), 2)))


def test_classic_agents_see_babyai_without_its_text_mission() -> None:
    """Issue 16: BabyAI in `gym-llm bench` — SB3's MlpPolicy gets the image and direction."""
    pytest.importorskip("minigrid")
    from gym_llm.experiments.specs import parse_env_spec

    spec = parse_env_spec("BabyAI-GoToObj-v0")  # registered on demand, no module: prefix
    env = make_flat_env(spec.id, seed=0)
    assert env.dropped_keys == ("mission",)
    assert env.observation_space.shape == (7 * 7 * 3 + 4,)
    obs, *_ = env.step(2)
    assert obs.shape == (151,) and obs.dtype == np.float32
