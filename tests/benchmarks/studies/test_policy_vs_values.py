"""The policy-against-values study: a saved agent's greedy play, its values' greedy play and
``Q*``'s, with each state played wrong and what fixing it alone gains (tiny model)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmarks.studies.policy_vs_values import (
    discounted_q_star,
    error_by_visits,
    exact_table,
    main,
    replay_visits,
    saved_replay,
)
from gym_llm import DQN, LLMPolicy, make_text_env
from gym_llm.evaluation.exact import exact_policy_value
from tests.builders import small_ppo
from tests.models import tiny_model_fixture

model_dir = tiny_model_fixture("model_dir", ["left", "down", "right", "up"])


def test_exact_tables_best_moves_reach_the_optimum() -> None:
    states, q_star, best, value_of = exact_table("FrozenLake-v1", {"is_slippery": False})
    assert len(states) == 16 and value_of(best) == 1.0
    assert value_of(q_star.argmax(1)) == 0.0  # undiscounted ties: left at the start waits forever
    states, q_star, best, value_of = exact_table("Blackjack-v1", {"sab": False})
    assert len(states) == 280 and abs(value_of(best) - (-0.0466)) < 1e-3
    assert value_of(np.zeros(280, dtype=int)) < -0.15  # always stick


def test_blackjacks_discounted_q_star_discounts_hits_only() -> None:
    _, q_star, _, _ = exact_table("Blackjack-v1", {"sab": False})
    np.testing.assert_allclose(discounted_q_star("Blackjack-v1", {}, 1.0), q_star, atol=1e-9)
    q95 = discounted_q_star("Blackjack-v1", {}, 0.95)
    np.testing.assert_allclose(q95[:, 0], q_star[:, 0], atol=1e-12)  # a stick pays at once
    # A hit that can go on is paid later, discounted: the values are compared with these.
    assert np.abs(q95[:, 1] - q_star[:, 1]).max() > 0.01


def test_a_saved_agent_is_read_state_by_state(model_dir: Path, tmp_path: Path) -> None:
    model = small_ppo(model_dir, "FrozenLake-v1", n_envs=2, n_steps=4, batch_size=8, n_epochs=1,
                      policy={"action_mode": "choice"})  # fmt: skip
    assert model.q_critic is not None  # the defaults learn action values here
    model.learn(8)
    model.save(tmp_path / "agent")
    (row,) = main([str(tmp_path / "agent"), "--env-kwargs", "is_slippery=False", "--top", "2",
                   "--json", str(tmp_path / "out.json")])  # fmt: skip
    assert row["optimum"] == 1.0 and 0.0 <= row["policy_value"] <= 1.0
    assert 0 <= row["values_right_there"] <= row["states_wrong"] <= 11  # holes and goal never
    assert len(row["worst"]) == min(2, row["states_wrong"])
    for wrong in row["worst"]:
        assert abs(sum(wrong["policy"]) - 1) < 1e-2 and len(wrong["values"]) == 4
        assert wrong["gain"] > 0 and len(wrong["plays"]) == 4
    # every env step of the run is in the replay, counted once in a band of plays
    bands = row["error_by_plays"]
    assert bands and {band["plays"] for band in bands} <= {"0", "1-9", "10-99", "100-999", "1000+"}
    assert all(band["mean_abs_error"] >= abs(band["mean_error"]) for band in bands)
    assert (tmp_path / "out.json").stat().st_size > 0


def test_a_saved_dqn_is_read_by_its_values_posterior(tiny_model_dir: Path, tmp_path: Path) -> None:
    env = make_text_env("Blackjack-v1", n_envs=2, seed=0, env_kwargs={"sab": False})
    policy_kwargs = {"model": str(tiny_model_dir), "lora": {"r": 4}, "action_mode": "choice"}
    dqn = DQN(LLMPolicy, env, learning_starts=2, policy_kwargs=policy_kwargs, seed=0, device="cpu")
    dqn.learn(16)
    dqn.save(tmp_path / "agent")
    (row,) = main([str(tmp_path / "agent"), "--env", "Blackjack-v1", "--env-kwargs", "sab=False"])
    # the study's greedy play is the one predict(deterministic=True) makes, valued exactly
    assert abs(row["policy_value"] - exact_policy_value(dqn, "Blackjack-v1", {"sab": False})) < 1e-9
    assert row["values_gamma"] == dqn.gamma and row["optimum"] < 0
    # with the LM's prior off (beta 0, the default) the policy is its values' greedy play, so the
    # values are wrong wherever the policy is
    assert dqn.beta == 0 and row["policy_value"] == row["values_value"]
    assert row["states_wrong"] > 0 and row["values_right_there"] == 0  # 16 env steps learn little
    for wrong in row["worst"]:
        assert wrong["plays"] is None and len(wrong["values"]) == 2 and wrong["gain"] > 0
    assert row["error_by_plays"] == []  # DQN saves no replay to count plays in
    assert np.isfinite(row["values_mean_error"])


def test_plays_are_counted_from_the_saved_replay(model_dir: Path, tmp_path: Path) -> None:
    model = small_ppo(model_dir, "FrozenLake-v1", n_envs=2, n_steps=4, batch_size=8, n_epochs=1,
                      policy={"action_mode": "choice"})  # fmt: skip
    model.learn(8)
    model.save(tmp_path / "agent")
    replay = saved_replay(tmp_path / "agent")
    assert replay.held_rows == 4 and replay.n_envs == 2  # 8 env steps of 2 envs
    texts = list(dict.fromkeys(str(o) for o in replay.latest(4)[0].ravel()))
    visits = replay_visits(replay, texts)
    assert visits.shape == (len(texts), 4) and visits.sum() == 8


def test_errors_are_banded_by_plays_over_visited_states_only() -> None:
    errors = np.array([[0.5, -0.1, 0.0], [0.3, 0.3, 0.3], [1.0, 1.0, 1.0]])
    visits = np.array([[0, 20, 150], [2, 0, 0], [0, 0, 0]])  # the last state was never visited
    rows = {row["plays"]: row for row in error_by_visits(errors, visits)}
    assert rows["0"]["moves"] == 3 and rows["0"]["mean_error"] == round((0.5 + 0.3 + 0.3) / 3, 4)
    assert rows["1-9"]["mean_error"] == 0.3 and rows["10-99"]["mean_error"] == -0.1
    assert rows["100-999"]["mean_abs_error"] == 0.0 and "1000+" not in rows
