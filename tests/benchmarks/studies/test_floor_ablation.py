"""The floor ablation study: a saved agent trained on per arm, the watched cells read at each
point (tiny model on TextMaze)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmarks.studies.floor_ablation import run_arm
from tests.builders import small_ppo
from tests.models import tiny_model_fixture

model_dir = tiny_model_fixture("model_dir", ["north", "east", "south", "west"])


def test_each_arm_trains_the_same_agent_on_with_its_own_settings(
    model_dir: Path, tmp_path: Path
) -> None:
    model = small_ppo(model_dir, "gym_llm/TextMaze-v0", n_envs=2, n_steps=4, batch_size=8,
                      n_epochs=1, learning_rate=1e-2, policy={"action_mode": "choice"})  # fmt: skip
    assert model.q_critic is not None and model.min_action_prob > 0  # the defaults: values, floor
    model.learn(16)
    model.save(tmp_path / "agent")
    arms = {
        arm: run_arm(
            tmp_path / "agent", "gym_llm/TextMaze-v0", [5, 15], arm, 16, 8, seed=1, n_envs=2
        )
        for arm in ("as-saved", "floor-up:min_action_prob=0.2")
    }
    for arm, rows in arms.items():
        assert [r["env_steps"] for r in rows] == [0, 8, 16]
        assert rows[0]["arm"] == arm.split(":")[0]
        for row in rows:
            assert np.isfinite(row["value"]) and row["value"] <= 0  # every move costs 1
            for cell in row["cells"].values():
                assert abs(sum(cell["probs"]) - 1) < 1e-3 and 0 <= cell["best"] < 4
    # the barrier is idle at the defaults' 0.05 this early (every move above it); at 0.2 it acts
    saved, off = arms["as-saved"], arms["floor-up:min_action_prob=0.2"]
    assert saved[0]["cells"] == off[0]["cells"]  # the same agent at the start
    assert saved[-1]["cells"] != off[-1]["cells"]  # the setting changed what it learned
    assert off[0]["settings"] == {"min_action_prob": 0.2}
