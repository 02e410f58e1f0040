"""``FrozenFeatures``: each observation's frozen features computed once, and, for a learner that
reads no prior, taken from the trunk cache without a pass through the layers above."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from gym_llm import LLMPolicy, make_text_env
from gym_llm.rl.common.frozen_features import FrozenFeatures
from tests.models import tiny_model_fixture

WORDS = ["apple", "banana", "cherry", "grape"]
model_dir = tiny_model_fixture("model_dir", WORDS)
OBS = [f"Options: apple, banana, cherry, grape. Target: {w}." for w in WORDS]


def _policy(model_dir: Path, **kwargs: Any) -> LLMPolicy:
    env = make_text_env("gym_llm/KeywordBandit-v0")
    return LLMPolicy(
        env.observation_space, env.action_space, lambda _: 1e-3, model=str(model_dir),
        device="cpu", lora={"r": 4}, **kwargs,
    )  # fmt: skip


def test_features_without_the_prior_come_from_the_trunk_cache(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = _policy(model_dir)
    assert policy.trunk_cache is not None
    with torch.inference_mode():
        log_prior, expected = policy.prior_choice_scores(OBS)
    passes: list[list[str]] = []
    original = policy.prior_choice_scores

    def counted(observations: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        passes.append(observations)
        return original(observations)

    monkeypatch.setattr(policy, "prior_choice_scores", counted)

    prior, features = FrozenFeatures(policy, prior=False)(OBS + OBS[:1])
    assert not passes  # no pass with the adapter off
    torch.testing.assert_close(features[: len(OBS)], expected)
    assert torch.equal(features[-1], features[0])
    assert prior.shape == (len(OBS) + 1, len(WORDS))
    assert not prior.any()  # no prior wanted: zeros, never NaN in a TD target
    assert not features.is_inference()  # the Q head saves its input for backward

    with_prior, _ = FrozenFeatures(policy)(OBS)
    assert len(passes) == 1  # the prior needs the pass
    torch.testing.assert_close(with_prior, log_prior)


def test_without_a_trunk_cache_the_features_come_from_the_model(model_dir: Path) -> None:
    policy = _policy(model_dir, trunk_cache_mb=0)
    assert policy.trunk_cache is None
    with torch.inference_mode():
        _, expected = policy.prior_choice_scores(OBS)
    prior, features = FrozenFeatures(policy, prior=False)(OBS)
    torch.testing.assert_close(features, expected)
    assert prior.shape == (len(OBS), len(WORDS))
