"""The critic's settings and the advantage estimators inside PPO (tiny model)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from gym_llm import PPO
from gym_llm.rl.ppo.advantages import critic_free_advantages, dones_from_starts
from tests.builders import small_ppo
from tests.models import tiny_model_fixture

WORDS = ["apple", "banana", "cherry"]


model_dir = tiny_model_fixture("model_dir", WORDS)


def _ppo(model_dir: Path, **kwargs: Any) -> PPO:
    policy = {"action_mode": "choice", **kwargs.pop("policy_kwargs", {})}
    settings: dict[str, Any] = {"n_steps": 4, "batch_size": 8, "n_epochs": 1, "learning_rate": 1e-3}
    return small_ppo(model_dir, n_envs=4, policy=policy, **{**settings, **kwargs})


def test_values_are_stored_with_the_observation_they_were_computed_on(model_dir: Path) -> None:
    """A known bug class: a value paired with the next (or previous) turn's observation."""
    model = _ppo(model_dir, policy_kwargs={"action_head": False})  # the critic on the LM's state
    with torch.no_grad():  # values that differ from observation to observation
        torch.nn.init.normal_(model.policy.value_head.weight, std=1.0)
    model.learn(16)  # then one more rollout, under the trained weights
    buffer = model.rollout_buffer
    model.collect_rollouts(model.env, _NoCallback(), buffer, 4)
    with torch.no_grad():
        for t in range(buffer.buffer_size):
            observations = [str(o) for o in buffer.observations_text[t]]
            expected = model.policy.predict_values(observations).numpy()
            np.testing.assert_allclose(buffer.values[t], expected, atol=1e-5)
    assert np.ptp(buffer.values) > 1e-3  # a shifted pairing would not match


class _NoCallback:
    def on_rollout_start(self) -> None: ...
    def on_rollout_end(self) -> None: ...
    def on_step(self) -> bool:
        return True

    def update_locals(self, _locals: dict[str, Any]) -> None: ...


def test_value_head_has_its_own_learning_rate(model_dir: Path) -> None:
    model = _ppo(model_dir, policy_kwargs={"value_lr_scale": 10.0})
    groups = model.policy.optimizer.param_groups
    assert len(groups) == 3  # the LM's weights, the action head (on by default), the value head
    value_ids = {id(p) for p in model.policy.value_head.parameters()}
    assert {id(p) for p in groups[2]["params"]} == value_ids
    assert not value_ids & {id(p) for g in groups[:2] for p in g["params"]}
    model.learn(16)
    assert groups[2]["lr"] == pytest.approx(10 * groups[0]["lr"])
    assert groups[1]["lr"] == pytest.approx(groups[0]["lr"])
    assert groups[0]["lr"] == pytest.approx(1e-3)
    with pytest.raises(ValueError, match="value_lr_scale"):
        _ppo(model_dir, policy_kwargs={"value_lr_scale": 0.0})


def test_optimizer_state_saved_as_one_group_loads_into_two(model_dir: Path, tmp_path: Path) -> None:
    model = _ppo(model_dir)
    model.learn(16)
    model.save(tmp_path / "agent")
    state = torch.load(tmp_path / "agent" / "policy.pt", weights_only=True)
    groups = state["optimizer"]["param_groups"]
    merged = {k: v for k, v in groups[0].items() if k not in ("params", "lr_scale")}
    merged["params"] = [i for g in groups for i in g["params"]]
    state["optimizer"]["param_groups"] = [merged]  # what agents saved before this change hold
    torch.save(state, tmp_path / "agent" / "policy.pt")
    loaded = PPO.load(tmp_path / "agent", device="cpu")
    a, b = model.policy.optimizer.state_dict(), loaded.policy.optimizer.state_dict()
    assert [len(g["params"]) for g in a["param_groups"]] == [
        len(g["params"]) for g in b["param_groups"]
    ]
    for index, entry in a["state"].items():
        torch.testing.assert_close(entry["exp_avg"], b["state"][index]["exp_avg"])


def test_critic_warmup_trains_only_the_value_head(model_dir: Path) -> None:
    model = _ppo(model_dir, critic_warmup_steps=16, ent_coef=0.01)
    with torch.no_grad():
        model.policy.value_head.bias.fill_(0.5)
    before = {n: p.detach().clone() for n, p in model.policy.named_parameters()}
    model.learn(16)
    changed = {n for n, p in model.policy.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all(n.startswith("value_head") for n in changed), changed
    model.learn(16, reset_num_timesteps=False)  # past the warm-up: LoRA trains
    changed = {n for n, p in model.policy.named_parameters() if not torch.equal(p, before[n])}
    assert any("lora_" in n for n in changed)


@pytest.mark.parametrize("estimator", ["rebn", "grpo", "rloo", "gigpo"])
def test_critic_free_estimators_fill_the_buffer(model_dir: Path, estimator: str) -> None:
    model = _ppo(model_dir, advantage_estimator=estimator)
    model.learn(16)
    buffer = model.rollout_buffer
    last_dones = np.ones(buffer.n_envs)  # KeywordBandit episodes are one step
    expected = critic_free_advantages(
        estimator,
        buffer.rewards,
        dones_from_starts(buffer.episode_starts, last_dones),
        buffer.episode_starts,
        buffer.observations_text,
        model.gamma,
    )
    np.testing.assert_allclose(buffer.advantages, expected, atol=1e-6)
    assert np.isfinite(model.first_ratio_error) and model.first_ratio_error < 1e-5


def test_reward_scale_and_argument_checks(model_dir: Path) -> None:
    plain = _ppo(model_dir)
    plain.learn(16)
    scaled = _ppo(model_dir, reward_scale=20.0)  # same seeds, same first rollout
    scaled.learn(16)
    assert plain.rollout_buffer.rewards.any()
    np.testing.assert_allclose(scaled.rollout_buffer.rewards, 20 * plain.rollout_buffer.rewards)
    with pytest.raises(ValueError, match="advantage_estimator"):
        _ppo(model_dir, advantage_estimator="ppo")
    with pytest.raises(ValueError, match="clip_range_vf"):
        _ppo(model_dir, clip_range_vf=0.0)
    with pytest.raises(ValueError, match="critic_warmup_steps"):
        _ppo(model_dir, critic_warmup_steps=-1)


def test_value_clipping_runs_and_saves(model_dir: Path, tmp_path: Path) -> None:
    model = _ppo(model_dir, clip_range_vf=0.1, advantage_estimator="gigpo", reward_scale=2.0)
    model.learn(16)
    model.save(tmp_path / "agent")
    loaded = PPO.load(tmp_path / "agent", device="cpu")
    assert (loaded.clip_range_vf, loaded.advantage_estimator, loaded.reward_scale) == (
        0.1,
        "gigpo",
        2.0,
    )


def test_the_critics_offset_and_the_gradient_norms_are_logged(model_dir: Path) -> None:
    """Returns a hundred times the reward's size: the zero-initialised critic sits far below
    them (an offset explained variance cannot show) and its gradient is most of the norm."""
    model = _ppo(model_dir, reward_scale=100.0)
    model.learn(16)
    logged = model.logger.name_to_value
    buffer = model.rollout_buffer
    offset = float(np.mean(buffer.values - buffer.returns))
    assert logged["train/value_offset"] == pytest.approx(offset, rel=1e-5)
    assert logged["train/return_mean"] == pytest.approx(float(np.mean(buffer.returns)), rel=1e-5)
    assert logged["train/value_offset"] < -10  # KeywordBandit pays 0 or 1: returns 0 or 100
    assert logged["train/grad_norm"] >= logged["train/value_grad_norm"] > 0
    assert logged["train/value_grad_norm"] > 0.9 * logged["train/grad_norm"]


def test_value_normalization_brings_the_critic_to_the_returns_scale(model_dir: Path) -> None:
    """Returns a hundred times the reward: after one update the plain head's values are still
    near 0, the normalised head's near the rollout's mean return."""
    gaps = {}
    for normalize in (False, True):
        model = _ppo(
            model_dir, reward_scale=100.0, policy_kwargs={"value_normalization": normalize}
        )
        model.learn(16)  # one rollout, one update
        assert bool(model.policy.value_head.normalize) == normalize
        mean_return = float(np.mean(model.rollout_buffer.returns))
        with torch.no_grad():
            values = model.policy.predict_values(WORDS).numpy()
        gaps[normalize] = float(np.abs(values - mean_return).max())
        assert 10 < mean_return < 90  # both arms were rewarded and not
    assert gaps[False] > 10
    assert gaps[True] < 0.5 * gaps[False]  # measured: 5.6 against 25.0


def test_a_normalised_critic_is_saved_and_loaded(model_dir: Path, tmp_path: Path) -> None:
    model = _ppo(model_dir, reward_scale=100.0, policy_kwargs={"value_normalization": True})
    model.learn(16)
    head = model.policy.value_head
    observations = ["banana", "apple"]
    with torch.no_grad():
        values = model.policy.predict_values(observations)
    model.save(tmp_path / "agent")
    loaded = PPO.load(tmp_path / "agent", device="cpu")
    assert loaded.policy.value_head.normalize
    assert float(loaded.policy.value_head.mean) == pytest.approx(float(head.mean))
    with torch.no_grad():
        torch.testing.assert_close(loaded.policy.predict_values(observations), values)
