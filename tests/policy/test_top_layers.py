"""Training only the top layers, and the update that starts where the frozen layers end.

The update from stored states must be the whole-model recomputation, only cheaper: the same
log-probs, values, entropies and gradients (to float rounding), in every action mode.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from gym_llm import PPO, LLMPolicy, make_text_env
from gym_llm.policy.top_layers import (
    TopLayers,
    pad_states,
    resolve_trainable_layers,
    top_layers_supported,
)
from gym_llm.testing import make_tiny_model, make_tiny_tokenizer
from tests.models import tiny_model_fixture

WORDS = ["apple", "banana", "cherry", "grape"]
OBS = [f"Options: apple, banana, cherry, grape. Target: {w}." for w in WORDS]
#: What trains besides the top layers: the critic, and choice mode's default action head.
HEADS = ("value_head", "action_head")


#: 4 layers, the option words as single tokens.
deep_model_dir = tiny_model_fixture("deep_model_dir", WORDS, layers=4)


#: 4 layers, no word tokens: every action is several byte tokens.
bytes_model_dir = tiny_model_fixture("bytes_model_dir", layers=4)


def _policy(model_dir: Path, **kwargs) -> LLMPolicy:
    env = make_text_env("gym_llm/KeywordBandit-v0")
    return LLMPolicy(
        env.observation_space, env.action_space, lambda _: 1e-3, model=str(model_dir), **kwargs
    )


def test_pad_states_left_pads_prompts_and_right_pads_extras() -> None:
    prompts = [torch.full((2, 3), 1.0), torch.full((4, 3), 2.0)]
    extras = [torch.full((3, 3), 5.0), torch.zeros((0, 3))]
    hidden, mask, width = pad_states(prompts, extras)
    assert width == 4 and hidden.shape == (2, 7, 3)
    assert mask.tolist() == [[0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0, 0]]
    assert torch.equal(hidden[0, 2:4], prompts[0]) and torch.equal(hidden[0, 4:], extras[0])
    assert torch.equal(hidden[1, :4], prompts[1]) and not hidden[1, 4:].any()
    assert not hidden[0, :2].any()
    hidden[0, 2] = -1.0
    assert prompts[0][0, 0] == 1.0  # a copy: stored states are never modified
    _, mask, width = pad_states(prompts)
    assert width == 4 and mask.shape == (2, 4)


def test_top_layers_run_what_the_whole_model_runs() -> None:
    tokenizer = make_tiny_tokenizer(WORDS)
    model = make_tiny_model(len(tokenizer), layers=4)
    assert top_layers_supported(model)
    top = TopLayers(model, 2)
    torch.manual_seed(0)
    prefix = torch.randint(5, 80, (6,))
    ids = torch.randint(5, 80, (3, 9))
    mask = torch.ones((3, 6 + 9), dtype=torch.long)
    mask[0, 6:9] = 0  # left padding after the prefix, as the policy lays batches out
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with top.capture() as captured, torch.no_grad():
        whole = model(
            input_ids=torch.cat([prefix.expand(3, -1), ids], -1),
            attention_mask=mask,
            position_ids=positions,
        ).logits
        model(input_ids=prefix.unsqueeze(0))
        inputs, prefix_states = captured[0], captured[1][0]
        cache = top.prefix_cache(top.encode_prefix(prefix_states), 3)
        mine = top.logits(top(inputs[:, 6:], mask, positions[:, 6:], cache))
        alone = top.logits(top(inputs, mask, positions))
    real = mask[:, 6:].bool()
    torch.testing.assert_close(mine[real], whole[:, 6:][real], atol=1e-5, rtol=0)
    torch.testing.assert_close(alone[mask.bool()], whole[mask.bool()], atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="start"):
        TopLayers(model, 4)


def test_trainable_layers_choose_what_trains(deep_model_dir: Path) -> None:
    lora = _policy(deep_model_dir, lora={"r": 2}, trainable_layers=1)
    trained = [n for n, p in lora.named_parameters() if p.requires_grad]
    assert trained and all(".layers.3." in n or n.startswith(HEADS) for n in trained)
    assert any("lora_A" in n for n in trained)
    full = _policy(deep_model_dir, lora=None, trainable_layers=2)
    trained = {n for n, p in full.named_parameters() if p.requires_grad}
    assert any(".layers.2." in n for n in trained) and any(".layers.3." in n for n in trained)
    assert not any(".layers.0." in n or ".layers.1." in n or "embed" in n for n in trained)
    assert "lm.model.norm.weight" in trained
    everything = _policy(deep_model_dir, lora=None)  # "auto" without LoRA: all layers
    assert everything.trainable_layers is None and everything.top is None
    assert all(p.requires_grad for p in everything.parameters())
    auto = _policy(deep_model_dir, lora={"r": 2})  # "auto" with LoRA: the top quarter
    assert auto.trainable_layers == 1 and auto.first_trainable_layer == 3
    assert auto.top is not None and auto.uses_rollout_states
    assert _policy(deep_model_dir, lora={"r": 2}, trainable_layers=0.5).trainable_layers == 2
    assert _policy(deep_model_dir, lora={"r": 2}, trainable_layers="all").top is None
    own = _policy(deep_model_dir, lora={"r": 2, "layers_to_transform": [0]})
    assert own.trainable_layers is None  # the caller's LoRA layers win over "auto"
    assert any(".layers.0." in n for n, p in own.named_parameters() if p.requires_grad)
    with pytest.raises(ValueError, match="between 1 and the model's 4"):
        _policy(deep_model_dir, trainable_layers=5)
    with pytest.raises(ValueError, match="layers_to_transform"):
        _policy(deep_model_dir, lora={"r": 2, "layers_to_transform": [3]}, trainable_layers=1)


@pytest.mark.parametrize(
    ("value", "lora", "expected"),
    [
        ("auto", True, 8),
        ("auto", False, None),
        (None, True, None),
        ("all", True, None),
        (30, True, None),
        (4, False, 4),
        (0.1, True, 3),
        (0.01, True, 1),
    ],
)
def test_resolve_trainable_layers(value: object, lora: bool, expected: int | None) -> None:
    assert resolve_trainable_layers(value, 30, uses_lora=lora) == expected


@pytest.mark.parametrize("value", [0, 31, 1.0, 1.5, -0.5, "half", True])
def test_resolve_trainable_layers_rejects(value: object) -> None:
    with pytest.raises(ValueError, match="trainable_layers must be"):
        resolve_trainable_layers(value, 30, uses_lora=True)


def test_docstring_examples() -> None:
    import doctest

    import gym_llm.policy.top_layers

    assert doctest.testmod(gym_llm.policy.top_layers).failed == 0


def _twins(model_dir: Path, **kwargs) -> tuple[LLMPolicy, LLMPolicy]:
    """The same weights, the update from stored states or from the whole model."""
    fast = _policy(model_dir, trainable_layers=2, **kwargs)
    slow = _policy(model_dir, trainable_layers=2, reuse_rollout_states=False, **kwargs)
    with torch.no_grad():  # a non-zero adapter and value head, so gradients are not trivial
        torch.manual_seed(1)
        for param in fast.parameters():
            if param.requires_grad:
                param.add_(0.05 * torch.randn_like(param))
    slow.load_state_dict(fast.state_dict())
    assert fast.uses_rollout_states and not slow.uses_rollout_states
    return fast, slow


@pytest.mark.parametrize(
    ("mode", "model", "share_prefix", "head"),
    [
        ("choice", "deep", True, None),
        ("choice", "bytes", True, None),  # multi-token candidates
        ("choice", "deep", False, None),
        ("generate", "deep", True, None),  # free text
        ("generate", "bytes", False, None),
        ("generate", "deep", True, True),  # the head on the action words' tokens
        ("generate", "bytes", False, True),
        ("constrained", "deep", True, None),  # replies among the listed actions, the default
        ("constrained", "bytes", False, False),
    ],
)
def test_update_from_states_equals_the_whole_model(
    deep_model_dir: Path,
    bytes_model_dir: Path,
    one_torch_thread: None,
    mode: str,
    model: str,
    share_prefix: bool,
    head: bool | None,
) -> None:
    model_dir = deep_model_dir if model == "deep" else bytes_model_dir
    fast, slow = _twins(
        model_dir, lora={"r": 2}, action_mode="choice" if mode == "choice" else "generate",
        max_new_tokens=4, share_prefix=share_prefix, action_head=head,
        reply_constraint="action" if mode == "constrained" else "off",
    )  # fmt: skip
    assert (fast.action_head is not None) == (head if head is not None else mode != "generate")
    observations = [*OBS, OBS[0], OBS[0]]  # repeated observations share one row in choice mode
    torch.manual_seed(0)
    with torch.inference_mode():
        step = fast.act(observations)
    assert step.states is not None and len(step.states) == len(observations)
    fast.set_training_mode(True)
    slow.set_training_mode(True)
    ev_fast = fast.evaluate_actions(observations, step.actions, step.states)
    ev_slow = slow.evaluate_actions(observations, step.actions)
    for i, stored in enumerate(step.token_log_probs):  # invariant 1 on the fast path
        np.testing.assert_allclose(
            ev_fast.token_log_probs[i][ev_fast.mask[i]].detach().numpy(), stored, atol=1e-5
        )
    torch.testing.assert_close(ev_fast.token_log_probs, ev_slow.token_log_probs, atol=1e-5, rtol=0)
    torch.testing.assert_close(ev_fast.values, ev_slow.values, atol=1e-5, rtol=0)
    torch.testing.assert_close(ev_fast.entropy, ev_slow.entropy, atol=1e-5, rtol=0)
    weights = torch.linspace(-1, 1, len(observations)).unsqueeze(-1)
    for ev in (ev_fast, ev_slow):
        loss = (ev.token_log_probs * weights).sum() + ev.values.square().sum() + ev.entropy.sum()
        loss.backward()
    grads = {n: p.grad for n, p in slow.named_parameters() if p.requires_grad}
    for name, param in fast.named_parameters():
        if param.requires_grad:
            assert param.grad is not None and grads[name] is not None, name
            torch.testing.assert_close(param.grad, grads[name], atol=1e-4, rtol=1e-3)


def test_update_from_states_when_the_prefix_split_differs_from_the_rollout(
    deep_model_dir: Path, one_torch_thread: None
) -> None:
    """A rollout batch that could not share the prefix, trained with turns that could (and the
    other way round), gives the whole model's numbers."""
    fast, slow = _twins(deep_model_dir, lora={"r": 2}, action_mode="generate", max_new_tokens=3)
    torch.manual_seed(0)
    with torch.inference_mode():
        shared = fast.act(OBS[:2])
        saved, fast.prompts.shared_prefix = (
            fast.prompts.shared_prefix,
            [],
        )  # this batch encodes whole prompts
        whole = fast.act(OBS[2:])
        fast.prompts.shared_prefix = saved
    assert shared.states is not None and whole.states is not None
    assert {s.offset for s in shared.states} == {len(saved)}
    assert {s.offset for s in whole.states} == {0}
    actions, states = [*shared.actions, *whole.actions], [*shared.states, *whole.states]
    ev_fast = fast.evaluate_actions(OBS, actions, states)
    ev_slow = slow.evaluate_actions(OBS, actions)
    torch.testing.assert_close(ev_fast.token_log_probs, ev_slow.token_log_probs, atol=1e-5, rtol=0)
    fast.prompts.shared_prefix = []  # now the update cannot share it, but half the turns did
    ev_whole = fast.evaluate_actions(OBS, actions, states)
    torch.testing.assert_close(ev_whole.token_log_probs, ev_slow.token_log_probs, atol=1e-5, rtol=0)
    torch.testing.assert_close(ev_whole.values, ev_slow.values, atol=1e-5, rtol=0)


def test_choice_rollouts_score_each_observation_once_per_weights(
    deep_model_dir: Path, one_torch_thread: None
) -> None:
    policy = _policy(deep_model_dir, lora={"r": 2}, trainable_layers=2)
    calls: list[int] = []
    assert policy.top is not None  # the trainable layers run on cached frozen-layer states
    policy.top.first_layer.register_forward_hook(lambda *_: calls.append(1))
    with torch.inference_mode():
        first = policy.act([OBS[0], OBS[1], OBS[0]])
        passes = len(calls)
        again = policy.act([OBS[1], OBS[0]])
    assert len(calls) == passes  # nothing recomputed
    assert first.states is not None and again.states is not None
    assert first.states[0] is first.states[2] is again.states[1]
    fresh = _policy(deep_model_dir, lora={"r": 2}, trainable_layers=2)
    fresh.load_state_dict(policy.state_dict())
    with torch.no_grad():
        expected, _, _ = fresh.actions.scores(OBS[:2])
        remembered, _, _ = policy.actions.remembered_scores(OBS[:2])
    torch.testing.assert_close(remembered, expected, atol=1e-6, rtol=0)
    policy.set_training_mode(True)
    ev = policy.evaluate_actions(OBS[:1], first.actions[:1], first.states[:1])
    (-ev.token_log_probs.sum()).backward()
    policy.optimizer.step()
    policy.set_training_mode(False)
    with torch.inference_mode():
        policy.act([OBS[0]])
    assert len(calls) > passes  # new weights: scored again
    policy.memoize_choice_scores = False
    with torch.inference_mode():
        before = len(calls)
        policy.act([OBS[0]])
        once = len(calls) - before
        policy.act([OBS[0]])
    assert once > 0 and len(calls) == before + 2 * once  # switched off: scored every time


def test_the_memo_is_forgotten_when_weights_change_behind_its_back(
    deep_model_dir: Path, one_torch_thread: None
) -> None:
    """Hugging Face's Trainer (SFT) changes weights in place without bumping their version
    counters; the policy's own weights_version still sees it, so no caller has to invalidate."""
    policy = _policy(deep_model_dir, lora={"r": 2}, trainable_layers=2)
    with torch.no_grad():
        before, _, _ = policy.actions.remembered_scores(OBS[:1])
        for name, parameter in policy.named_parameters():
            if "lora_B" in name:
                parameter.data.normal_(0.0, 0.5)  # in place, no version bump
        after, _, _ = policy.actions.remembered_scores(OBS[:1])
        fresh, _, _ = policy.actions.scores(OBS[:1])
    assert not after.equal(before)
    torch.testing.assert_close(after, fresh)


def test_the_memo_follows_evaluation_temperature_and_its_memory_budget(
    deep_model_dir: Path, one_torch_thread: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gym_llm.policy.choice

    cached = _policy(deep_model_dir, lora={"r": 2}, trainable_layers=2)
    cached.predict(OBS[0], deterministic=True)  # evaluation: states from the trunk cache
    kept = cached.actions._memo[OBS[0]][2]
    with torch.inference_mode():
        assert kept is not None and cached.act([OBS[0]]).states == [kept]  # nothing recomputed
    policy = _policy(deep_model_dir, lora={"r": 2}, trainable_layers=2, trunk_cache_mb=0)
    policy.predict(OBS[0], deterministic=True)  # no trunk cache: evaluation keeps no states
    assert policy.actions._memo[OBS[0]][2] is None
    with torch.inference_mode():
        step = policy.act([OBS[0]])  # a rollout needs them: scored again, with states
    assert step.states is not None and policy.actions._memo[OBS[0]][2] is step.states[0]
    with torch.no_grad():
        before, _, _ = policy.actions.remembered_scores(OBS[:1])
        policy.temperature = 2.0
        after, _, _ = policy.actions.remembered_scores(OBS[:1])
    torch.testing.assert_close(after, before / 2)  # not the memo's temperature-1 scores
    one_entry = step.states[0].nbytes
    monkeypatch.setattr(gym_llm.policy.choice, "_MEMO_MAX_BYTES", int(2.5 * one_entry))
    with torch.inference_mode():
        for observation in OBS:
            policy.act([observation])
            assert policy.actions._memo_bytes <= 2.5 * one_entry
    assert len(policy.actions._memo) < len(OBS)


@pytest.mark.parametrize("mode", ["choice", "generate"])
def test_ppo_trains_only_the_top_layers_from_states(
    deep_model_dir: Path, one_torch_thread: None, mode: str
) -> None:
    env = make_text_env("gym_llm/KeywordBandit-v0", n_envs=2, seed=0)
    model = PPO(
        LLMPolicy,
        env,
        n_steps=4,
        batch_size=4,
        n_epochs=2,
        learning_rate=1e-2,
        policy_kwargs={
            "model": str(deep_model_dir),
            "lora": {"r": 2},
            "action_mode": mode,
            "max_new_tokens": 3,
            "trainable_layers": 1,
        },
        seed=0,
        device="cpu",
    )
    before = {n: p.detach().clone() for n, p in model.policy.named_parameters()}
    model.learn(8)
    assert model.rollout_buffer.states[0, 0] is not None
    assert model.first_ratio_error < 1e-5  # invariant 1
    changed = {
        n for n, p in model.policy.named_parameters() if not torch.equal(p.detach(), before[n])
    }
    assert changed and all(".layers.3." in n or n.startswith(HEADS) for n in changed)
