"""The policy-against-values study: a saved agent's greedy play, its values' greedy play and
``Q*``'s, with each state played wrong and what fixing it alone gains (tiny model)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmarks.studies.policy_vs_values import exact_table, main
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
        assert wrong["gain"] > 0
    assert (tmp_path / "out.json").stat().st_size > 0
