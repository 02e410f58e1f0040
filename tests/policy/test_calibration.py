"""Choice calibration: the content-free prompt's scores are divided out, exactly (tiny model)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from gym_llm import PPO
from gym_llm.policy.llm_policy import CONTENT_FREE_OBSERVATION
from tests.builders import small_ppo
from tests.models import tiny_model_fixture

WORDS = ["apple", "banana", "cherry"]


model_dir = tiny_model_fixture("model_dir", WORDS)


def _ppo(model_dir: Path, calibration: bool, mode: str = "choice", **more: object) -> PPO:
    policy = {"action_mode": mode, "choice_calibration": calibration, **more}
    return small_ppo(
        model_dir, n_envs=4, policy=policy, n_steps=4, batch_size=8, n_epochs=1, learning_rate=1e-3
    )


def _logits(model: PPO, observations: list[str]) -> torch.Tensor:
    with torch.no_grad():
        logits, _, _ = model.policy.actions.scores(observations)
    return logits


def test_calibrated_scores_are_the_raw_ones_minus_the_content_free_ones(model_dir: Path) -> None:
    raw, calibrated = _ppo(model_dir, False), _ppo(model_dir, True)
    obs = [f"Options: {', '.join(WORDS)}. Target: {w}." for w in WORDS]
    offsets = _logits(raw, [CONTENT_FREE_OBSERVATION])[0]
    torch.testing.assert_close(_logits(calibrated, obs), _logits(raw, obs) - offsets)
    # under the content-free prompt itself the calibrated policy is uniform
    uniform = _logits(calibrated, [CONTENT_FREE_OBSERVATION])[0]
    torch.testing.assert_close(uniform, torch.zeros_like(uniform), atol=1e-5, rtol=0)
    assert _logits(raw, obs).std() > 0  # the raw prior is not uniform: the test can fail


def test_calibration_keeps_invariant_one_and_survives_save_load(
    model_dir: Path, tmp_path: Path
) -> None:
    model = _ppo(model_dir, True)
    model.learn(16)
    assert model.first_ratio_error < 1e-5
    model.save(tmp_path / "agent")
    loaded = PPO.load(tmp_path / "agent", device="cpu")
    assert loaded.policy.choice_calibration is not None
    torch.testing.assert_close(loaded.policy.choice_calibration, model.policy.choice_calibration)
    obs = [f"Options: {', '.join(WORDS)}. Target: {w}." for w in WORDS]
    np.testing.assert_allclose(_logits(model, obs).numpy(), _logits(loaded, obs).numpy(), atol=1e-5)


def test_calibration_needs_choice_mode_or_constrained_replies(model_dir: Path) -> None:
    with pytest.raises(ValueError, match="choice mode"):
        _ppo(model_dir, True, mode="generate", reply_constraint="off")
    assert _ppo(model_dir, True, mode="generate").policy.calibrated  # replies among the list


def test_rollouts_log_exploration_and_input_dependence(model_dir: Path) -> None:
    from stable_baselines3.common.logger import Logger

    model = _ppo(model_dir, False)
    recorded: dict[str, float] = {}
    model.learn(16)
    original = Logger.record

    def record(self: Logger, key: str, value: object, exclude: object = None) -> None:
        if key.startswith("rollout/"):
            recorded[key] = value
        original(self, key, value, exclude)

    Logger.record = record
    try:
        model.learn(16, reset_num_timesteps=False)
    finally:
        Logger.record = original
    for key in ("state_entropy", "mutual_information", "greedy_changed", "distinct_observations"):
        assert f"rollout/{key}" in recorded, recorded.keys()
    assert 0 <= recorded["rollout/mutual_information"] <= np.log(3) + 1e-9
    assert 0 <= recorded["rollout/greedy_changed"] <= 1
