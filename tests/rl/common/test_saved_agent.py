"""An agent saved by older code (``tests/fixtures/saved-agent/``, written by
``tests/fixtures/make_saved_agent.py`` at the start of issue 15's refactor) still loads and acts
exactly as it did: module moves and refactors must not break saved runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import torch

from gym_llm import PPO
from tests.paths import FIXTURES

FIXTURE = FIXTURES / "saved-agent"


#: What the first saved PPO held (gym_llm.PPO/1, 2026-11-21): a record, never to change.
FIRST_SAVED_HYPERPARAMETERS = (
    "learning_rate",
    "n_steps",
    "batch_size",
    "n_epochs",
    "gamma",
    "gae_lambda",
    "clip_range_value",
    "normalize_advantage",
    "ent_coef",
    "vf_coef",
    "max_grad_norm",
    "target_kl",
    "kl_coef",
    "micro_batch_size",
    "n_logged_samples",
    "seed",
)

#: What the first saved DQN held (gym_llm.DQN/1, 2026-11-24): a record, never to change.
FIRST_DQN_HYPERPARAMETERS = (
    "learning_rate",
    "buffer_size",
    "learning_starts",
    "batch_size",
    "tau",
    "gamma",
    "train_freq",
    "gradient_steps",
    "n_steps",
    "target_update_interval",
    "exploration_fraction",
    "exploration_initial_eps",
    "exploration_final_eps",
    "max_grad_norm",
    "alpha",
    "beta",
    "q_width",
)


def _copy(tmp_path: Path) -> Path:
    shutil.copytree(FIXTURE, tmp_path / "saved-agent")
    agent = tmp_path / "saved-agent" / "agent"
    config = json.loads((agent / "config.json").read_text())
    config["policy_kwargs"]["model"] = str(tmp_path / "saved-agent" / "model")
    (agent / "config.json").write_text(json.dumps(config))
    return agent


def test_old_agent_loads_and_acts_as_it_did(tmp_path: Path, one_torch_thread: None) -> None:
    expected = json.loads((FIXTURE / "expected.json").read_text())
    agent = PPO.load(_copy(tmp_path), device="cpu")
    assert agent.num_timesteps == expected["num_timesteps"]
    with torch.inference_mode():
        step = agent.policy.act(expected["observations"], deterministic=True)
    assert list(step.replies) == expected["replies"]
    np.testing.assert_allclose(step.action_probs, expected["action_probs"], atol=1e-5)
    np.testing.assert_allclose(step.values.numpy(), expected["values"], atol=1e-5)

    # The check can fail: the untrained adapter and value head give other figures.
    fresh = PPO.load(_copy(tmp_path / "fresh"), device="cpu")
    with torch.no_grad():
        for name, parameter in fresh.policy.named_parameters():
            if "lora_B" in name or "value_head" in name:
                parameter.zero_()  # LoRA's B and the value head start at zero
    fresh.policy.invalidate_prefix_cache()
    with torch.inference_mode():
        untrained = fresh.policy.act(expected["observations"], deterministic=True)
    assert untrained.action_probs is not None
    assert np.abs(untrained.action_probs - np.asarray(expected["action_probs"])).max() > 1e-4
    assert np.abs(untrained.values.numpy() - np.asarray(expected["values"])).max() > 1e-3


def test_a_reply_pattern_the_env_declares_is_saved_with_the_spaces() -> None:
    from gym_llm.rl.common.checkpoint import SavedConfig, space_records
    from gym_llm.spaces import TextActions, TextObservations

    obs, act = space_records(TextObservations(64), TextActions(pattern="[a-z]{5}"))
    saved = SavedConfig({}, {}, 0, 0, obs, act)
    assert saved.spaces()[1].pattern == "[a-z]{5}"
    old = SavedConfig({}, {}, 0, 0, obs, {k: v for k, v in act.items() if k != "pattern"})
    assert old.spaces()[1].pattern is None  # saved before patterns existed


def test_agents_saved_before_a_setting_existed_load_as_they_trained() -> None:
    """A saved agent that lacks a setting loads with the value it trained with, so a resumed run
    goes on as it was; every setting saved since the first format has such a value."""
    from gym_llm.rl.common import checkpoint as c
    from gym_llm.rl.common.checkpoint import SavedConfig

    added = set(c.SAVED_HYPERPARAMETERS) - set(FIRST_SAVED_HYPERPARAMETERS)
    assert added == set(c.PPO_BEFORE_ADDED) | {"q_gamma"}
    assert set(c.DQN_HYPERPARAMETERS) - set(FIRST_DQN_HYPERPARAMETERS) == set(c.DQN_BEFORE_ADDED)

    first = dict.fromkeys(FIRST_SAVED_HYPERPARAMETERS, 1) | {"gamma": 0.9}
    ppo = SavedConfig(first, {}, 0, 0, {}, {}).constructor_kwargs()
    assert (ppo["advantage_estimator"], ppo["policy_update"]) == ("gae", "clip")
    assert (ppo["min_action_prob"], ppo["floor_mode"]) == (0.0, "barrier")
    assert (ppo["q_gamma"], ppo["q_huber_delta"], ppo["clip_range"]) == (0.9, 1.0, 1)
    saved_now = {"clip_range_value": 0.2, "advantage_estimator": "q", "min_action_prob": 0.05}
    kwargs = SavedConfig(saved_now, {}, 0, 0, {}, {}).constructor_kwargs()
    assert (kwargs["advantage_estimator"], kwargs["min_action_prob"]) == ("q", 0.05)  # kept
    dqn = SavedConfig({"gamma": 0.9}, {}, 0, 0, {}, {}).dqn_constructor_kwargs()
    assert (dqn["huber_delta"], dqn["learning_rate_decay"], dqn["gamma"]) == (1.0, 0, 0.9)
    assert dqn["distill_final_steps"] == 0
