"""PPO's part of a checkpoint: which tensors ``policy.pt`` holds, and loading them back into an
agent built with the saved settings (tiny model)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from gym_llm.rl.common.checkpoint_files import CheckpointError
from gym_llm.rl.ppo.saving import agent_tensors, load_trained_state
from tests.builders import small_ppo
from tests.models import tiny_model_fixture

WORDS = ["apple", "banana", "cherry"]

model_dir = tiny_model_fixture("model_dir", WORDS)


def test_policy_file_holds_what_training_changed(model_dir: Path) -> None:
    plain = agent_tensors(
        small_ppo(model_dir, n_envs=2, policy={"action_mode": "choice"}, advantage_estimator="gae")
    )
    assert {"trainable", "optimizer", "advantage_scale"} <= set(plain)
    assert "q_critic" not in plain
    q = small_ppo(model_dir, n_envs=2, policy={"action_mode": "choice"}, advantage_estimator="q")
    assert set(agent_tensors(q)["q_critic"]) == {
        "q_net", "q_target", "optimizer", "td_steps", "skipped_steps", "owed", "rng", "replay",
        "features",
    }  # fmt: skip


def test_loading_restores_counters_and_scale(model_dir: Path, tmp_path: Path) -> None:
    model = small_ppo(model_dir, n_envs=2, n_steps=4, batch_size=8, n_epochs=1)
    model.learn(16)
    model.save(tmp_path / "agent")
    other = small_ppo(model_dir, n_envs=2, n_steps=4, batch_size=8, n_epochs=1)
    load_trained_state(other, tmp_path / "agent")
    assert (other.num_timesteps, other._n_updates) == (model.num_timesteps, model._n_updates)
    assert other.advantage_scale.count == model.advantage_scale.count
    np.testing.assert_allclose(other.advantage_scale.var, model.advantage_scale.var)
    for name, value in model.policy.trainable_state_dict().items():
        assert torch.equal(other.policy.trainable_state_dict()[name], value), name


def test_a_damaged_training_state_names_the_file(model_dir: Path, tmp_path: Path) -> None:
    model = small_ppo(model_dir, n_envs=2, n_steps=4, batch_size=8, n_epochs=1)
    model.save(tmp_path / "agent")
    state_file = tmp_path / "agent" / "training_state.json"
    state = json.loads(state_file.read_text())
    del state["rng"]
    state_file.write_text(json.dumps(state))
    with pytest.raises(CheckpointError, match=r"training_state\.json is damaged.*earlier"):
        load_trained_state(model, tmp_path / "agent")
