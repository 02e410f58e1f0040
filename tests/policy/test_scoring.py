"""The prior a value learner acts on: the starting policy's choice log-probs and frozen features."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gym_llm import PPO
from tests.builders import small_ppo
from tests.models import tiny_model_fixture

OBS = ["The number is 2.", "The number is 8.", "The number is 5.", "The number is 2."]


model_dir = tiny_model_fixture("model_dir", ["low", "high"])


def _ppo(model_dir: Path, **policy: object) -> PPO:
    policy = {"action_head": True, **policy}
    return small_ppo(model_dir, "gym_llm/HighLow-v0", policy=policy, n_steps=8, batch_size=16)


def test_prior_is_the_starting_policy_and_training_does_not_move_it(model_dir: Path) -> None:
    model = _ppo(model_dir)
    policy = model.policy
    log_prior, features = policy.prior_choice_scores(OBS)
    assert log_prior.shape == (4, 2) and features.shape[0] == 4
    torch.testing.assert_close(log_prior.exp().sum(-1), torch.ones(4))
    with torch.no_grad():
        start = torch.log_softmax(policy.actions.scores(OBS)[0].float(), -1)
    torch.testing.assert_close(log_prior, start)  # LoRA's B and the head start at zero
    torch.testing.assert_close(log_prior[0], log_prior[3])  # same observation, same numbers
    # Every trainable weight moves (the adapter, the action head): the policy changes, the
    # prior and the features do not.
    with torch.no_grad():
        for p in policy.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.5)
        moved = torch.log_softmax(policy.actions.scores(OBS)[0].float(), -1)
    assert not torch.allclose(moved, start, atol=1e-3)
    again, features_again = policy.prior_choice_scores(OBS)
    torch.testing.assert_close(again, log_prior)
    torch.testing.assert_close(features_again, features)


def test_prior_needs_choice_mode_and_lora(model_dir: Path) -> None:
    generate = _ppo(model_dir, action_mode="generate", action_head=False)
    with pytest.raises(ValueError, match="choice mode"):
        generate.policy.prior_choice_scores(OBS)
    full = _ppo(model_dir, lora=None, action_head=False)
    with pytest.raises(ValueError, match="LoRA"):
        full.policy.prior_choice_scores(OBS)
