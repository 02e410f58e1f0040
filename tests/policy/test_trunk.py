"""The cached frozen trunk: the same numbers as the whole model, in rollouts and the update.

Invariant 1 holds through it (the update's log-probs are the rollout's), repeated turns share one
row of the update's pass with the gradients of separate rows, and the cache follows the frozen
weights it was computed with.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from gym_llm import LLMPolicy, make_text_env
from gym_llm.policy.outputs import Evaluation
from gym_llm.replies import Reply, conversation_json
from tests.models import tiny_model_fixture

WORDS = ["apple", "banana", "cherry", "grape"]
OBS = [f"Options: apple, banana, cherry, grape. Target: {w}." for w in WORDS]


#: 4 layers, the option words as single tokens.
words_dir = tiny_model_fixture("words_dir", WORDS, layers=4)


#: 4 layers, every action several byte tokens.
bytes_dir = tiny_model_fixture("bytes_dir", layers=4)


def _policy(model_dir: Path, **kwargs) -> LLMPolicy:
    env = make_text_env("gym_llm/KeywordBandit-v0")
    kwargs = {"lora": {"r": 2}, "trainable_layers": 2, **kwargs}
    return LLMPolicy(
        env.observation_space, env.action_space, lambda _: 1e-3, model=str(model_dir), **kwargs
    )


def _shape_with_the_adapter(policy: LLMPolicy) -> None:
    """Non-zero LoRA B weights, so that the adapter shapes every pass (a fresh one is zero)."""
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.3)


def _pair(model_dir: Path, **kwargs) -> tuple[LLMPolicy, LLMPolicy]:
    """A policy with the trunk cache and one without, with the same non-zero LoRA weights."""
    cached, plain = (
        _policy(model_dir, **kwargs),
        _policy(model_dir, **{**kwargs, "trunk_cache_mb": 0}),
    )
    torch.manual_seed(0)
    _shape_with_the_adapter(cached)
    plain.load_state_dict(cached.state_dict())
    assert cached.uses_trunk_cache and not plain.uses_trunk_cache
    return cached, plain


def _observations(conversation: bool) -> list[str]:
    if not conversation:
        return [*OBS, OBS[0], OBS[2]]
    turns = [
        conversation_json(
            [
                {"role": "user", "content": OBS[i]},
                {"role": "assistant", "content": Reply(WORDS[i], [])},
                {"role": "user", "content": OBS[(i + 1) % 4]},
            ]
        )
        for i in range(3)
    ]
    return [*turns, turns[1]]


def _assert_same_gradients(fast: dict[str, torch.Tensor], slow: dict[str, torch.Tensor]) -> None:
    """Equal to float32 rounding: the log-softmax runs on differently shaped logits, which
    changes the rounding of each log-prob by ~1e-7 (measured in float64: forward log-probs and
    entropies equal, gradients within 3e-7 of their largest entry). In float32 the gap depends
    on the CPU: up to 1.5e-4 of the largest entry (a key projection's LoRA B) on one, so the
    bound is 5e-4; a gradient taken on the wrong prompt differs by the entry's own size."""
    assert fast.keys() == slow.keys() and fast
    for name, grad in fast.items():
        scale = float(slow[name].abs().max()) + 1e-6
        torch.testing.assert_close(grad, slow[name], atol=5e-4 * scale, rtol=0, msg=name)


def _grads(policy: LLMPolicy, ev: Evaluation) -> dict[str, torch.Tensor]:
    policy.optimizer.zero_grad()
    weights = torch.linspace(-1.0, 2.0, ev.values.shape[0])  # no sum of zero
    loss = (ev.token_log_probs.sum(-1) * weights).sum() + (ev.values * weights).sum()
    (loss + ev.entropy.sum()).backward()
    return {n: p.grad.clone() for n, p in policy.named_parameters() if p.grad is not None}


@pytest.mark.parametrize(
    ("model", "share_prefix", "conversation"),
    [
        ("words", True, False),
        ("words", False, False),
        ("bytes", True, False),  # candidates of several tokens
        ("words", True, True),
        ("bytes", False, True),
    ],
)
def test_the_cached_trunk_gives_the_whole_models_numbers_and_gradients(
    words_dir: Path,
    bytes_dir: Path,
    one_torch_thread: None,
    model: str,
    share_prefix: bool,
    conversation: bool,
) -> None:
    cached, plain = _pair(
        words_dir if model == "words" else bytes_dir,
        share_prefix=share_prefix,
        conversation=conversation,
    )
    observations = _observations(conversation)
    with torch.inference_mode():
        step = cached.act(observations, deterministic=True)
        reference = plain.act(observations, deterministic=True)
        assert cached.trunk_cache is not None
        misses = cached.trunk_cache.stats.misses
        cached.invalidate_prefix_cache()  # forget the scores, keep the trunk
        again = cached.act(observations, deterministic=True)
    assert cached.trunk_cache.stats.misses == misses  # every prompt came from the cache
    assert step.action_probs is not None and reference.action_probs is not None
    np.testing.assert_allclose(step.action_probs, reference.action_probs, atol=1e-5)
    np.testing.assert_allclose(step.values.numpy(), reference.values.numpy(), atol=1e-5)
    np.testing.assert_allclose(again.action_probs, step.action_probs, atol=1e-6)
    first, repeat = (0, len(OBS)) if not conversation else (1, 3)
    assert step.states is not None and step.states[first] is step.states[repeat]  # one entry
    for policy in (cached, plain):
        policy.set_training_mode(True)
    ev = cached.evaluate_actions(observations, step.actions, step.states)
    whole = plain.evaluate_actions(observations, step.actions)  # one row per turn, all layers
    for i, stored in enumerate(step.token_log_probs):  # invariant 1
        np.testing.assert_allclose(ev.token_log_probs[i, :1].detach().numpy(), stored, atol=1e-5)
    torch.testing.assert_close(ev.token_log_probs, whole.token_log_probs, atol=1e-5, rtol=0)
    torch.testing.assert_close(ev.values, whole.values, atol=1e-5, rtol=0)
    _assert_same_gradients(_grads(cached, ev), _grads(plain, whole))


@pytest.mark.parametrize("constraint", ["off", "action"])
def test_repeated_prompts_share_one_pass_in_generate_mode_with_the_same_gradients(
    bytes_dir: Path, one_torch_thread: None, constraint: str
) -> None:
    policy = _policy(
        bytes_dir, action_mode="generate", max_new_tokens=4, reply_constraint=constraint
    )
    _shape_with_the_adapter(policy)
    observations = [OBS[0], OBS[1], OBS[0], OBS[0], OBS[2]]
    torch.manual_seed(1)
    with torch.inference_mode():
        step = policy.act(observations)
    assert step.states is not None
    assert len({tuple(a) for a in step.actions}) > 1  # different replies to one prompt
    policy.set_training_mode(True)
    shared = policy.evaluate_actions(observations, step.actions, step.states)
    size = policy.runner.split_prefix([policy.prompt_ids(o) for o in observations])
    whole = policy.evaluate_actions(observations, step.actions)  # all layers, no states
    others = [whole]
    if constraint == "off":  # the unmasked pass itself, one row per turn
        others.append(policy.actions._replies_from_states(step.states, step.actions, size))
    for i, stored in enumerate(step.token_log_probs):  # invariant 1
        got = shared.token_log_probs[i][shared.mask[i]].detach().numpy()
        np.testing.assert_allclose(got, stored, atol=1e-5)
    for other in others:
        torch.testing.assert_close(shared.token_log_probs, other.token_log_probs, atol=1e-5, rtol=0)
        torch.testing.assert_close(shared.values, other.values, atol=1e-5, rtol=0)
        torch.testing.assert_close(shared.entropy, other.entropy, atol=1e-5, rtol=0)
    _assert_same_gradients(_grads(policy, shared), _grads(policy, others[-1]))


def test_policies_on_one_model_share_the_trunk_and_a_changed_trunk_is_recomputed(
    words_dir: Path, one_torch_thread: None
) -> None:
    first, second = _policy(words_dir), _policy(words_dir)
    assert first.trunk_cache is second.trunk_cache is not None
    with torch.inference_mode():
        first.act(OBS)
        misses = first.trunk_cache.stats.misses
        second.act(OBS)  # another seed on the same model: nothing to compute below
    assert second.trunk_cache.stats.misses == misses
    assert second.top is not None
    with torch.no_grad():  # a frozen weight written in place
        second.top.decoder.layers[0].mlp.down_proj.weight.mul_(1.5)
    with torch.inference_mode():
        changed = second.act(OBS, deterministic=True)
    assert second.trunk_cache is not first.trunk_cache  # left the shared cache for its own
    fresh = _policy(words_dir, trunk_cache_mb=0)
    fresh.load_state_dict(second.state_dict())
    with torch.inference_mode():
        expected = fresh.act(OBS, deterministic=True)
    np.testing.assert_allclose(changed.action_probs, expected.action_probs, atol=1e-5)


def test_the_bound_holds_and_evicted_prompts_are_computed_again(
    words_dir: Path, one_torch_thread: None
) -> None:
    probe = _policy(words_dir, trunk_cache_mb=1)
    with torch.inference_mode():
        entry = probe.act(OBS[:1]).states[0].nbytes  # type: ignore[index]
    tight, plain = _pair(words_dir, trunk_cache_mb=1.5 * entry / 2**20)  # room for one prompt
    with torch.inference_mode():
        for _ in range(2):
            for observation in OBS:
                tight.invalidate_prefix_cache()
                got = tight.act([observation], deterministic=True)
                want = plain.act([observation], deterministic=True)
                np.testing.assert_allclose(got.action_probs, want.action_probs, atol=1e-5)
    cache = tight.trunk_cache
    assert cache is not None and cache.nbytes <= cache.max_bytes and len(cache) == 1
    assert cache.stats.evictions > 0


def test_no_trunk_cache_without_frozen_layers_or_in_generate_mode(words_dir: Path) -> None:
    assert _policy(words_dir, trainable_layers=None).trunk_cache is None  # every layer trains
    assert _policy(words_dir, action_mode="generate").trunk_cache is None
    assert not _policy(words_dir, trunk_cache_mb=0).uses_trunk_cache


@pytest.mark.parametrize("model", ["words", "bytes"])
def test_the_pass_that_stops_at_the_trainable_layers_keeps_what_the_whole_model_kept(
    words_dir: Path, bytes_dir: Path, one_torch_thread: None, model: str
) -> None:
    model_dir = words_dir if model == "words" else bytes_dir
    stopped = _policy(model_dir, trunk_cache_mb=3)  # a cache of its own, empty
    whole = _policy(model_dir, trunk_cache_mb=4)
    with torch.inference_mode():
        computed = stopped.trunk_states(OBS)  # frozen layers only
        kept = whole.act(OBS).states  # whole-model passes, states captured on the way
    assert kept is not None
    for a, b in zip(computed, kept, strict=True):
        assert a.offset == b.offset
        torch.testing.assert_close(a.prompt, b.prompt, atol=1e-5, rtol=0)
        if model == "bytes":  # several-token actions: the candidates' states too
            assert a.action is not None and b.action is not None
            torch.testing.assert_close(a.action, b.action, atol=1e-5, rtol=0)
