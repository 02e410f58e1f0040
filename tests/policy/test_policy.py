from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from gym_llm import LLMPolicy, make_text_env
from gym_llm.spaces import TextActions, TextObservations
from tests.models import tiny_model_fixture

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


kb_model_dir = tiny_model_fixture("kb_model_dir", ["apple", "banana", "cherry", "grape"])


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
    policy = _policy(kb_model_dir, action_mode="choice", choice_calibration=False)
    with torch.no_grad():
        scores, _, _ = policy.actions.scores(OBS)
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


def test_listed_replies_are_what_choice_mode_sends(kb_model_dir: Path) -> None:
    """A learner that picks the action itself (PPO's behaviour floor) sends these replies."""
    policy = _policy(kb_model_dir, action_mode="choice")
    replies = policy.listed_replies
    assert [str(r) for r in replies] == list(policy.actions_list)
    with torch.inference_mode():
        step = policy.act(OBS)
    for reply, action in zip(step.replies, step.actions, strict=True):
        assert reply == replies[int(action[0])]
    generating = _policy(kb_model_dir, action_mode="generate", max_new_tokens=4)
    with pytest.raises(ValueError, match="choice mode over one fixed list"):
        _ = generating.listed_replies


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
    with pytest.raises(TypeError, match="registry name, a path"):
        LLMPolicy(TextObservations(), TextActions(["a", "b"]), lambda _: 1e-3, model=object())
    with pytest.raises(ValueError, match="temperature"):
        _policy(kb_model_dir, temperature=0)


# --- the shared prompt prefix ------------------------------------------------------------------


def _twin_policies(model_dir: Path, mode: str, **kwargs) -> tuple[LLMPolicy, LLMPolicy]:
    """The same weights with and without prefix sharing (LoRA B is 0, so adapters agree)."""
    shared = _policy(model_dir, action_mode=mode, max_new_tokens=4, **kwargs)
    whole = _policy(model_dir, action_mode=mode, max_new_tokens=4, share_prefix=False, **kwargs)
    whole.load_state_dict(shared.state_dict())
    return shared, whole


def test_shared_prefix_is_found_and_covers_the_system_message(kb_model_dir: Path) -> None:
    policy = _policy(kb_model_dir)
    prompt = policy.prompt_ids(OBS[0])
    prefix = policy.shared_prefix
    assert len(prefix) >= 20 and prompt[: len(prefix)] == prefix
    text = policy.tokenizer.decode(prefix)
    assert "Reply with the target word" in text  # the instruction is inside the prefix
    assert "Target: cherry" not in text  # the observation is not
    assert _policy(kb_model_dir, share_prefix=False).shared_prefix == []


@pytest.mark.parametrize("mode", ["choice", "generate"])
def test_cached_prefix_gives_the_same_log_probs_and_values(kb_model_dir: Path, mode: str) -> None:
    """Rollouts (cached prefix KV) and training (prefix per micro-batch) match uncached passes."""
    shared, whole = _twin_policies(kb_model_dir, mode, lora={"r": 4})
    obs = [*OBS, "Options: apple, banana, cherry, grape. Target: grape. A longer one here."]
    torch.manual_seed(0)
    with torch.inference_mode():
        step = shared.act(obs)
        # cached for the next step (choice mode: the trainable layers' part only)
        assert shared.runner._prefix_kv is not None or shared.runner._top_prefix is not None
        reference = whole.predict_values(obs)
    np.testing.assert_allclose(step.values.numpy(), reference.numpy(), atol=1e-5)
    for policy in (shared, whole):
        policy.set_training_mode(True)
    ev_shared = shared.evaluate_actions(obs, step.actions)
    ev_whole = whole.evaluate_actions(obs, step.actions)
    torch.testing.assert_close(
        ev_shared.token_log_probs, ev_whole.token_log_probs, atol=1e-5, rtol=0
    )
    for i, stored in enumerate(step.token_log_probs):
        np.testing.assert_allclose(
            ev_whole.token_log_probs[i][ev_whole.mask[i]].detach().numpy(), stored, atol=1e-5
        )
    torch.testing.assert_close(ev_shared.values, ev_whole.values, atol=1e-5, rtol=0)


def test_gradients_through_the_shared_prefix_match(kb_model_dir: Path) -> None:
    """Computing the prefix once per micro-batch must not change the gradients."""
    shared, whole = _twin_policies(kb_model_dir, "generate", lora={"r": 4})
    with torch.no_grad():  # make LoRA B non-zero so the adapter shapes the prefix too
        for policy in (shared, whole):
            torch.manual_seed(1)
            for name, p in policy.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.1)
    actions = [np.array([5, 6, 7]), np.array([9])]
    grads = []
    for policy in (shared, whole):
        policy.set_training_mode(True)
        ev = policy.evaluate_actions(OBS, actions)
        (ev.token_log_probs.sum() + ev.values.sum()).backward()
        grads.append(
            {n: p.grad.clone() for n, p in policy.named_parameters() if p.grad is not None}
        )
    assert grads[0].keys() == grads[1].keys() and any("lora_A" in n for n in grads[0])
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], atol=1e-5, rtol=1e-4)


def test_prefix_cache_is_invalidated_when_weights_change(kb_model_dir: Path) -> None:
    policy = _policy(kb_model_dir, lora={"r": 4}, action_head=False)  # critic on the LM's state
    with torch.no_grad():
        policy.value_head.weight.normal_()  # zero at init: make values depend on the prompt
    with torch.inference_mode():
        before = policy.predict_values(OBS)
        cached = policy.runner._prefix_kv
        policy.predict_values(OBS)
        assert policy.runner._prefix_kv is cached  # reused, not recomputed
    policy.set_training_mode(True)  # what PPO.train does before changing weights
    assert policy.runner._prefix_kv is None
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.add_(0.5)
    policy.set_training_mode(False)
    with torch.inference_mode():
        after = policy.predict_values(OBS)
    reference = _policy(kb_model_dir, lora={"r": 4}, share_prefix=False, action_head=False)
    reference.load_state_dict(policy.state_dict())
    with torch.inference_mode():
        np.testing.assert_allclose(after.numpy(), reference.predict_values(OBS).numpy(), atol=1e-5)
    assert not np.allclose(after.numpy(), before.numpy())
    # An optimizer step changes the weights version: the next rollout encodes the prefix anew.
    cached = policy.runner._prefix_kv
    assert cached is not None
    policy.evaluate_actions(OBS, [np.array([0]), np.array([1])]).values.sum().backward()
    policy.optimizer.step()
    with torch.inference_mode():
        stepped = policy.predict_values(OBS)
    assert policy.runner._prefix_kv is not cached
    reference.load_state_dict(policy.state_dict())
    with torch.inference_mode():
        np.testing.assert_allclose(
            stepped.numpy(), reference.predict_values(OBS).numpy(), atol=1e-5
        )


def test_gradient_checkpointing_keeps_choice_log_probs_exact(kb_model_dir: Path) -> None:
    """Checkpointed layers drop KV caches, so training falls back to whole sequences."""
    policy = _policy(kb_model_dir, lora={"r": 4}, gradient_checkpointing=True)
    torch.manual_seed(0)
    with torch.inference_mode():
        step = policy.act(OBS)
    policy.set_training_mode(True)
    ev = policy.evaluate_actions(OBS, step.actions)
    stored = np.concatenate(step.token_log_probs)
    np.testing.assert_allclose(ev.token_log_probs.detach().numpy().ravel(), stored, atol=1e-5)
    np.testing.assert_allclose(ev.values.detach().numpy(), step.values.numpy(), atol=1e-5)


def test_rows_leave_the_decode_batch_at_their_stop_token(tmp_path: Path) -> None:
    """Replies of different lengths in one batch: each row stops at its own EOS, and what was
    stored for it is exactly what training recomputes (no row gets another row's tokens)."""
    from gym_llm.testing import save_tiny_model

    words = ["apple", "banana", "cherry", "grape"]
    model_dir = save_tiny_model(tmp_path / "m", words=words, alphabet="abcdefghijklmnopqrstuvwxyz")
    policy = _policy(
        model_dir,
        lora={"r": 4},
        action_mode="generate",
        max_new_tokens=40,
        temperature=5.0,
        reply_constraint="off",  # free text, so replies run to different lengths
    )
    obs = [f"options {w}" for w in words] * 4
    torch.manual_seed(0)
    with torch.inference_mode():
        step = policy.act(obs)
    lengths = [len(a) for a in step.actions]
    eos = policy.tokenizer.eos_token_id
    early = [a for a in step.actions if len(a) < 40]
    assert len(set(lengths)) > 2 and early, lengths  # rows really finished at different times
    assert all(a[-1] == eos and eos not in a[:-1] for a in early)
    ev = policy.evaluate_actions(obs, step.actions)
    for i, stored in enumerate(step.token_log_probs):
        assert len(stored) == lengths[i]
        recomputed = ev.token_log_probs[i][ev.mask[i]].detach().numpy()
        np.testing.assert_allclose(recomputed, stored, atol=1e-4)


@pytest.mark.parametrize("share_prefix", [True, False])
def test_reserved_kv_cache_samples_exactly_what_the_dynamic_cache_samples(
    tmp_path: Path, share_prefix: bool
) -> None:
    """The pre-allocated decode cache changes speed only: same seed, same tokens and log-probs,
    with rows of different lengths leaving the batch."""
    from gym_llm.testing import save_tiny_model

    words = ["apple", "banana", "cherry", "grape"]
    model_dir = save_tiny_model(tmp_path / "m", words=words, alphabet="abcdefghijklmnopqrstuvwxyz")
    steps = []
    for reserve in (True, False):
        policy = _policy(
            model_dir,
            lora={"r": 4},
            action_mode="generate",
            max_new_tokens=30,
            temperature=5.0,
            share_prefix=share_prefix,
            reserve_kv_cache=reserve,
        )
        torch.manual_seed(0)
        with torch.inference_mode():
            steps.append(policy.act([f"options {w}" for w in words] * 2))
    reserved, dynamic = steps
    assert len({len(a) for a in dynamic.actions}) > 1  # rows really left the batch
    for a, b in zip(reserved.actions, dynamic.actions, strict=True):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(reserved.token_log_probs, dynamic.token_log_probs, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)


# --- rollout kernels: packed frozen weights and the sampler ------------------------------------


@pytest.mark.parametrize("mode", ["choice", "generate"])
def test_packed_frozen_weights_give_the_same_rollouts(kb_model_dir: Path, mode: str) -> None:
    """oneDNN-packed base weights change speed only: same tokens, log-probs and values to float32
    rounding, with a trained (non-zero) adapter, and the update recomputes the same log-probs."""
    from gym_llm.policy.packed_linear import packing_available

    if not packing_available():
        pytest.skip("this torch has no oneDNN")
    packed = _policy(kb_model_dir, lora={"r": 4}, action_mode=mode, max_new_tokens=6)
    plain = _policy(
        kb_model_dir, lora={"r": 4}, action_mode=mode, max_new_tokens=6, pack_frozen_weights=False
    )
    with torch.no_grad():
        for name, p in packed.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    plain.load_state_dict(packed.state_dict())
    obs = OBS * 3
    steps = []
    for policy in (packed, plain):
        torch.manual_seed(0)
        with torch.inference_mode():
            steps.append(policy.act(obs))
    assert (
        packed.runner._packed is not None and packed.runner._packed.packed_bytes > 0
    )  # really used
    assert plain.runner._packed is None
    for a, b in zip(steps[0].actions, steps[1].actions, strict=True):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(steps[0].token_log_probs, steps[1].token_log_probs, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
    torch.testing.assert_close(steps[0].values, steps[1].values, rtol=0, atol=1e-5)
    ev = packed.evaluate_actions(obs, steps[0].actions)
    for i, stored in enumerate(steps[0].token_log_probs):
        recomputed = ev.token_log_probs[i][ev.mask[i]].detach().numpy()
        np.testing.assert_allclose(recomputed, stored, rtol=0, atol=1e-5)


def test_sampler_draws_from_the_softmax() -> None:
    """Inverse-CDF sampling: frequencies match the probabilities (chi-square, fixed seed), a
    zero-mass token is never drawn, and rows are independent distributions."""
    from gym_llm.policy.sampling import sample as _sample

    torch.manual_seed(0)
    logits = torch.randn(2, 40) * 2
    logits[:, 7] = -float("inf")
    log_probs = torch.log_softmax(logits, -1)
    n = 200_000
    draws = _sample(log_probs.repeat_interleave(n, 0)).view(2, n)
    for row in range(2):
        counts = torch.bincount(draws[row], minlength=40).double()
        expected = log_probs[row].double().exp() * n
        assert counts[7] == 0
        keep = expected > 0
        chi2 = float(((counts[keep] - expected[keep]) ** 2 / expected[keep]).sum())
        assert chi2 < 72.0, chi2  # 38 degrees of freedom: 99.9% quantile is 72.0


@pytest.mark.parametrize("mode", ["choice", "generate"])
def test_bf16_policy_runs_on_any_cpu_and_keeps_log_probs(kb_model_dir: Path, mode: str) -> None:
    """bf16 weights on a CPU without AVX512-BF16 used to crash in oneDNN's weight packing; the
    head's logits are float32 (gym_llm.policy.models.float32_logits), so stored and recomputed log-probs
    differ only by the bf16 hidden states' rounding (measured here: <= 1.2e-4)."""
    policy = _policy(kb_model_dir, lora={"r": 4}, action_mode=mode, max_new_tokens=5, dtype="bf16")
    assert policy.lm.get_output_embeddings().weight.dtype == torch.bfloat16
    torch.manual_seed(0)
    with torch.inference_mode():
        step = policy.act(OBS * 2)
    ev = policy.evaluate_actions(OBS, step.actions[:2])
    assert ev.token_log_probs.dtype == torch.float32
    for i in range(2):
        recomputed = ev.token_log_probs[i][ev.mask[i]].detach().numpy()
        np.testing.assert_allclose(recomputed, step.token_log_probs[i], atol=2e-3)
