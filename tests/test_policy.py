from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from gym_llm import LLMPolicy, make_text_env
from gym_llm.spaces import TextActions, TextObservations

OBS = [
    "Options: apple, banana, cherry, grape. Target: cherry.",
    "Options: apple, banana, cherry, grape. Target: apple.",
]


def _policy(model_dir: Path, **kwargs) -> LLMPolicy:
    env = make_text_env("gym_llm/KeywordBandit-v0")
    return LLMPolicy(
        env.observation_space,
        env.action_space,
        lambda _: 1e-3,
        model=str(model_dir),
        device="cpu",
        **kwargs,
    )


@pytest.fixture(scope="module")
def kb_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from gym_llm.testing import save_tiny_model

    return save_tiny_model(
        tmp_path_factory.mktemp("kb"), words=["apple", "banana", "cherry", "grape"]
    )


@pytest.mark.parametrize("mode", ["choice", "generate"])
def test_stored_log_probs_equal_training_log_probs(kb_model_dir: Path, mode: str) -> None:
    """Invariant 1 at the policy level: what the sampler stored is what training recomputes."""
    policy = _policy(kb_model_dir, lora={"r": 4}, action_mode=mode, max_new_tokens=5)
    torch.manual_seed(0)
    with torch.inference_mode():
        step = policy.act(OBS)
    ev = policy.evaluate_actions(OBS, step.actions)
    for i, stored in enumerate(step.token_log_probs):
        recomputed = ev.token_log_probs[i][ev.mask[i]].detach().numpy()
        np.testing.assert_allclose(recomputed, stored, atol=1e-5)
    np.testing.assert_allclose(ev.values.detach().numpy(), step.values.numpy(), atol=1e-5)


def test_choice_scores_with_shared_cache_match_full_sequences(kb_model_dir: Path) -> None:
    """Scoring candidates on the shared prompt KV cache equals scoring each full sequence."""
    policy = _policy(kb_model_dir, action_mode="choice")
    with torch.no_grad():
        scores, _ = policy._choice_scores(OBS)
        for b, obs in enumerate(OBS):
            prompt = policy.prompt_ids(obs)
            for k, action in enumerate(policy.actions_list):
                cand = policy.tokenizer(action, add_special_tokens=False)["input_ids"]
                ids = torch.tensor([prompt + cand])
                logp = torch.log_softmax(policy.lm(input_ids=ids).logits.float(), -1)[0]
                expected = sum(float(logp[len(prompt) - 1 + j, t]) for j, t in enumerate(cand))
                assert abs(float(scores[b, k]) - expected) < 1e-4


def test_generate_masks_after_eos_and_decodes(kb_model_dir: Path) -> None:
    policy = _policy(kb_model_dir, action_mode="generate", max_new_tokens=6)
    with torch.inference_mode():
        step = policy.act(OBS * 4)
    for tokens, lps, reply in zip(step.actions, step.token_log_probs, step.replies, strict=True):
        assert len(tokens) == len(lps) and 1 <= len(tokens) <= 6
        stops = [i for i, t in enumerate(tokens) if int(t) in policy.stop_ids]
        assert not stops or stops == [len(tokens) - 1]  # nothing kept after the stop token
        assert reply == policy.decode(tokens)
        assert np.all(lps <= 0)


def test_predict_returns_strings(kb_model_dir: Path) -> None:
    policy = _policy(kb_model_dir)
    assert policy.action_mode == "choice"
    reply, state = policy.predict(OBS[0], deterministic=True)
    assert reply in policy.actions_list and state is None
    replies, _ = policy.predict(np.array(OBS, dtype=object), deterministic=True)
    assert replies.shape == (2,) and all(r in policy.actions_list for r in replies)


def test_bad_arguments(kb_model_dir: Path) -> None:
    with pytest.raises(ValueError, match="action_mode='generate'"):
        LLMPolicy(
            TextObservations(),
            TextActions(None),
            lambda _: 1e-3,
            model=str(kb_model_dir),
            action_mode="choice",
        )
    with pytest.raises(TypeError, match="TextObservationWrapper"):
        LLMPolicy(
            gym.spaces.Discrete(3), TextActions(["a", "b"]), lambda _: 1e-3, model=str(kb_model_dir)
        )
    with pytest.raises(TypeError, match="registry name or a path"):
        LLMPolicy(TextObservations(), TextActions(["a", "b"]), lambda _: 1e-3, model=object())
    with pytest.raises(ValueError, match="temperature"):
        _policy(kb_model_dir, temperature=0)
