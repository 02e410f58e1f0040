"""One config per learner: keyword arguments replace its fields, unknown names and bad values are
refused with a message, ``model.NAME`` is the config's field, and ``save`` records the config."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from gym_llm import DQN, PPO, LLMPolicy, PolicyConfig, make_text_env
from gym_llm.rl.dqn.config import DQNConfig
from gym_llm.rl.ppo.config import PPOConfig, resolve_auto, resolve_floor
from tests.models import tiny_model_fixture

model_dir = tiny_model_fixture("model_dir", ["high", "low"])


def _policy(model_dir: Path) -> dict[str, object]:
    return {"model": str(model_dir), "lora": {"r": 4}}


def test_keywords_and_a_config_build_the_same_ppo(model_dir: Path, tmp_path: Path) -> None:
    env = make_text_env("gym_llm/HighLow-v0", n_envs=2, seed=0)
    by_keywords = PPO(LLMPolicy, env, n_epochs=2, batch_size=8, policy_kwargs=_policy(model_dir))
    by_config = PPO(
        LLMPolicy, env, PPOConfig(n_epochs=2, batch_size=8), policy_kwargs=_policy(model_dir)
    )
    mixed = PPO(
        LLMPolicy, env, PPOConfig(n_epochs=2), batch_size=8, policy_kwargs=_policy(model_dir)
    )
    assert by_keywords.config == by_config.config == mixed.config
    assert by_keywords.config.learning_rate == 5e-4  # the LoRA default, resolved
    by_keywords.n_epochs = 3  # SB3's habit: the attribute is the config's field
    assert by_keywords.config.n_epochs == 3
    by_keywords.save(tmp_path / "agent")
    saved = json.loads((tmp_path / "agent" / "config.json").read_text())["hyperparameters"]
    assert saved["n_epochs"] == 3 and saved["batch_size"] == 8
    assert PPO.load(tmp_path / "agent", env=env).config == by_keywords.config


def test_ppo_refuses_unknown_settings_and_bad_values(model_dir: Path) -> None:
    env = make_text_env("gym_llm/HighLow-v0", n_envs=2, seed=0)
    with pytest.raises(TypeError, match=r"unknown settings \['n_epoch'\].*policy_kwargs"):
        PPO(LLMPolicy, env, n_epoch=2, policy_kwargs=_policy(model_dir))
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        PPOConfig(batch_size=0)
    with pytest.raises(ValueError, match="policy_update must be 'clip', 'target' or 'auto'"):
        PPOConfig(policy_update="trust")
    with pytest.raises(ValueError, match=r"Unknown advantage_estimator 'qq'.*'auto'"):
        PPOConfig(advantage_estimator="qq")


def test_auto_settings_resolve_to_the_action_values_only_where_they_apply() -> None:
    assert resolve_auto("auto", "auto", q_applies=True) == ("q", "target")
    assert resolve_auto("auto", "auto", q_applies=False) == ("gae", "clip")
    assert resolve_auto("q", "auto", q_applies=True) == ("q", "target")
    assert resolve_auto("q", "auto", q_applies=False) == ("q", "clip")  # q's own error follows
    assert resolve_auto("gae", "auto", q_applies=True) == ("gae", "clip")
    assert resolve_auto("auto", "clip", q_applies=True) == ("q", "clip")  # a given update stays
    assert resolve_auto("rloo", "target", q_applies=False) == ("rloo", "target")


def test_the_auto_floor_comes_with_the_action_values_target_and_shrinks_over_many_actions() -> None:
    assert resolve_floor("auto", "q", "target", 2) == 0.05
    assert resolve_floor("auto", "q", "target", 4) == 0.05  # measured: up to four actions
    assert resolve_floor("auto", "q", "target", 8) == pytest.approx(0.025)  # 0.2 in all
    assert resolve_floor("auto", "q", "clip", 4) == 0.0  # only with the target it was measured on
    assert resolve_floor("auto", "gae", "clip", 4) == 0.0
    assert resolve_floor(0.1, "gae", "clip", 4) == 0.1  # a number stays as given
    assert resolve_floor(0.0, "q", "target", 4) == 0.0  # so 0 turns it off
    assert PPOConfig().min_action_prob == "auto"
    for bad in ("often", -0.1, 0.5, True, None):
        with pytest.raises(ValueError, match=r"min_action_prob must be 'auto' or a number"):
            PPOConfig(min_action_prob=bad)


def test_keywords_and_a_config_build_the_same_dqn(model_dir: Path, tmp_path: Path) -> None:
    env = make_text_env("gym_llm/HighLow-v0", n_envs=2, seed=0)
    by_keywords = DQN(LLMPolicy, env, alpha=0.05, n_steps=3, policy_kwargs=_policy(model_dir))
    by_config = DQN(
        LLMPolicy, env, DQNConfig(alpha=0.05, n_steps=3), policy_kwargs=_policy(model_dir)
    )
    fields = [f.name for f in dataclasses.fields(DQNConfig) if f.name != "train_freq"]
    assert all(getattr(by_keywords.config, f) == getattr(by_config.config, f) for f in fields)
    assert by_keywords.n_steps == 3  # not SB3's default written over it
    with pytest.raises(TypeError, match=r"unknown settings \['alfa'\]"):
        DQN(LLMPolicy, env, alfa=0.05, policy_kwargs=_policy(model_dir))
    with pytest.raises(ValueError, match="alpha"):
        DQNConfig(alpha=0.0)
    by_keywords.save(tmp_path / "dqn")
    assert DQN.load(tmp_path / "dqn", env=env).config.alpha == 0.05


def test_policy_settings_as_keywords_or_a_config(model_dir: Path, tmp_path: Path) -> None:
    env = make_text_env("gym_llm/HighLow-v0", n_envs=2, seed=0)
    config = PolicyConfig(model=str(model_dir), lora={"r": 4}, temperature=0.5)
    by_config = PPO(LLMPolicy, env, policy_kwargs={"config": config})
    by_keywords = PPO(LLMPolicy, env, policy_kwargs={**_policy(model_dir), "temperature": 0.5})
    assert by_config.policy.temperature == by_keywords.policy.temperature == 0.5
    recorded = by_config.policy._get_constructor_parameters()
    assert recorded == by_keywords.policy._get_constructor_parameters()
    by_config.save(tmp_path / "agent")  # the config's fields are recorded, not the object
    assert PPO.load(tmp_path / "agent", env=env).policy.temperature == 0.5
    with pytest.raises(TypeError, match=r"unknown settings \['temprature'\]"):
        PPO(LLMPolicy, env, policy_kwargs={**_policy(model_dir), "temprature": 0.5})
    with pytest.raises(ValueError, match="temperature must be > 0"):
        PolicyConfig(temperature=0.0)
