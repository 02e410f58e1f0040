"""The action head on centred features: zero at the start, calibrated once before its first step,
the same logits on every scoring path, saved with the agent (tiny model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from gym_llm import PPO, LLMPolicy, make_text_env
from gym_llm.policy.action_head import ActionHead, choice_extras, standardiser
from tests.builders import learn_and_check_head, small_ppo
from tests.models import tiny_model_fixture

WORDS = ["low", "high"]
OBS = ["The number is 2.", "The number is 8.", "The number is 5."]


model_dir = tiny_model_fixture("model_dir", WORDS)


def _ppo(model_dir: Path, head: bool, **policy: object) -> PPO:
    return small_ppo(
        model_dir, "gym_llm/HighLow-v0", policy={"action_head": head, **policy}, n_steps=8,
        batch_size=16, n_epochs=2, learning_rate=1e-2,
    )  # fmt: skip


def _logits(model: PPO, observations: list[str] = OBS) -> torch.Tensor:
    with torch.no_grad():
        return model.policy.actions.scores(observations)[0]


def test_standardiser_centres_and_floors_the_scale() -> None:
    features = torch.tensor([[1.0, 5.0, 0.0], [3.0, 5.0, 0.0], [2.0, 5.0, 3.0]])
    centre, scale = standardiser(features)
    torch.testing.assert_close(centre, torch.tensor([2.0, 5.0, 1.0]))
    var = torch.tensor([2 / 3, 0.0, 2.0])
    torch.testing.assert_close(scale, (var + var.mean()).sqrt())
    # one observation: nothing varies, the raw size is the scale (no division by zero)
    centre, scale = standardiser(torch.tensor([[3.0, 4.0]]))
    assert torch.isfinite(scale).all() and (scale > 0).all()
    with pytest.raises(ValueError, match="features must be"):
        standardiser(torch.zeros(3))


def test_a_fresh_head_adds_nothing_and_calibrating_it_changes_no_logit() -> None:
    head = ActionHead(4, 3)
    features = torch.randn(5, 4) * 10 + 50
    assert torch.equal(head(features), torch.zeros(5, 3))
    head.calibrate(features)
    assert head.is_calibrated and torch.equal(head(features), torch.zeros(5, 3))
    with torch.no_grad():
        head.linear.weight.fill_(1.0)
    out = head(features)
    expected = ((features - features.mean(0)) / head.scale).sum(-1, keepdim=True).expand(5, 3)
    torch.testing.assert_close(out, expected)
    with pytest.raises(RuntimeError, match="trained already"):
        head.calibrate(features)


def test_the_policy_starts_as_without_a_head(model_dir: Path) -> None:
    torch.testing.assert_close(_logits(_ppo(model_dir, True)), _logits(_ppo(model_dir, False)))


def test_learning_calibrates_then_moves_the_head_with_exact_ratios(model_dir: Path) -> None:
    model = _ppo(model_dir, True)
    head = learn_and_check_head(model)
    centre = head.centre.clone()
    model.learn(16, reset_num_timesteps=False)
    assert torch.equal(head.centre, centre)  # fixed after the first update
    # every scoring path agrees with the head in: trunk cache, whole model, no cache
    cached = _logits(model)
    model.policy.eval()
    with torch.no_grad():
        uncached = model.policy.actions.uncached_scores(OBS)[0]
    torch.testing.assert_close(cached, uncached, atol=1e-4, rtol=1e-4)
    fresh = _ppo(model_dir, True, trunk_cache_mb=0)
    fresh.policy.load_trainable_state_dict(model.policy.trainable_state_dict())
    torch.testing.assert_close(_logits(fresh), cached, atol=1e-4, rtol=1e-4)


def test_the_head_and_its_calibration_are_saved(model_dir: Path, tmp_path: Path) -> None:
    model = _ppo(model_dir, True)
    model.learn(16)
    model.save(tmp_path / "agent")
    loaded = PPO.load(tmp_path / "agent", device="cpu")
    assert loaded.policy.action_head is not None and loaded.policy.action_head.is_calibrated
    torch.testing.assert_close(_logits(loaded), _logits(model))
    # a policy without a head cannot take these weights silently
    plain = _ppo(model_dir, False)
    with pytest.raises(ValueError, match="do not match"):
        plain.policy.load_trainable_state_dict(model.policy.trainable_state_dict())


def test_free_text_has_no_calibration(model_dir: Path) -> None:
    with pytest.raises(ValueError, match="choice_calibration needs choice mode"):
        _ppo(model_dir, True, action_mode="generate", choice_calibration=True,
             reply_constraint="off")  # fmt: skip


def test_on_by_default_in_choice_mode_only() -> None:
    assert choice_extras("choice", None, None, None) == (True, True, True)
    assert choice_extras("generate", None, None, None) == (False, False, False)
    assert choice_extras("choice", False, None, None) == (False, True, False)
    # every layer trains: the head would read moving features, so it waits to be asked
    assert choice_extras("choice", None, None, None, frozen_below=False) == (False, True, False)
    assert choice_extras("choice", True, None, None, frozen_below=False) == (True, True, True)
    assert choice_extras("choice", True, False, False) == (True, False, False)
    with pytest.raises(ValueError, match="choice_calibration needs choice mode"):
        choice_extras("generate", None, True, None)
    with pytest.raises(ValueError, match="pass action_head=True"):
        choice_extras("choice", False, None, True)
    # generate mode: the head only when asked, and only on listed actions
    assert choice_extras("generate", True, None, None) == (True, False, True)
    with pytest.raises(ValueError, match="lists none"):
        choice_extras("generate", True, None, None, listed=False)


def test_the_defaults_are_saved_and_older_agents_load_without(
    model_dir: Path, tmp_path: Path
) -> None:
    env = make_text_env("gym_llm/HighLow-v0", n_envs=2, seed=0)
    model = PPO(LLMPolicy, env, policy_kwargs={"model": str(model_dir), "lora": {"r": 4}},
                n_steps=8, batch_size=16, seed=0, device="cpu")  # fmt: skip
    assert model.policy.action_head is not None and model.policy.choice_calibration is not None
    model.learn(16)
    model.save(tmp_path / "new")
    saved = json.loads((tmp_path / "new" / "config.json").read_text())["policy_kwargs"]
    assert saved["action_head"] is True and saved["choice_calibration"] is True
    loaded = PPO.load(tmp_path / "new", device="cpu")
    torch.testing.assert_close(_logits(loaded), _logits(model))
    # An agent saved before these defaults trained without either and wrote neither setting.
    old = _ppo(model_dir, False, choice_calibration=False)
    old.learn(16)
    old.save(tmp_path / "old")
    config = json.loads((tmp_path / "old" / "config.json").read_text())
    for name in ("action_head", "choice_calibration", "centred_critic"):
        config["policy_kwargs"].pop(name, None)
    (tmp_path / "old" / "config.json").write_text(json.dumps(config))
    reloaded = PPO.load(tmp_path / "old", device="cpu")
    assert reloaded.policy.action_head is None and reloaded.policy.choice_calibration is None
    torch.testing.assert_close(_logits(reloaded), _logits(old))
