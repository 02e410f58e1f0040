"""``ReservedCache`` gives the model the same keys/values as Hugging Face's ``DynamicCache``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

from gym_llm.policy.kv_cache import ReservedCache, ReservedLayer

PAD = 0


@pytest.fixture(scope="module")
def model() -> Any:
    """A tiny Llama with grouped-query attention (2 KV heads for 4 query heads), like SmolLM2."""
    config = LlamaConfig(
        vocab_size=50,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        pad_token_id=PAD,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def _decode(
    model: Any, cache: Any, steps: int, leave: dict[int, list[int]] | None = None
) -> tuple[list[torch.Tensor], list[list[int]]]:
    """Greedy decode of 3 left-padded prompts; rows in ``leave[step]`` leave the batch there."""
    prompts = [[5, 6, 7, 8, 9], [11, 12, 13], [20, 21, 22, 23]]
    width = max(map(len, prompts))
    ids = torch.tensor([[PAD] * (width - len(p)) + p for p in prompts])
    mask = (ids != PAD).long()
    position = (mask.cumsum(-1) - 1).clamp(min=0)
    logits_seen: list[torch.Tensor] = []
    tokens: list[list[int]] = [[] for _ in prompts]
    rows = list(range(len(prompts)))
    with torch.no_grad():
        out = model(
            input_ids=ids, attention_mask=mask, position_ids=position, past_key_values=cache
        )
        position = mask.sum(-1)
        for step in range(steps):
            logits = out.logits[:, -1]
            logits_seen.append(logits)
            token = logits.argmax(-1)
            for row, tok in zip(rows, token.tolist(), strict=True):
                tokens[row].append(tok)
            if leave and step in leave:
                keep = torch.tensor([i for i, r in enumerate(rows) if r not in leave[step]])
                out.past_key_values.batch_select_indices(keep)
                rows = [rows[i] for i in keep.tolist()]
                token, mask, position = token[keep], mask[keep], position[keep]
            mask = torch.cat([mask, torch.ones((len(rows), 1), dtype=mask.dtype)], -1)
            out = model(
                input_ids=token.unsqueeze(-1),
                attention_mask=mask,
                position_ids=position.unsqueeze(-1),
                past_key_values=out.past_key_values,
            )
            position = position + 1
    return logits_seen, tokens


@pytest.mark.parametrize("reserve", [0, 3, 64])
def test_reserved_cache_matches_dynamic_cache(model: Any, reserve: int) -> None:
    """Same logits and greedy tokens, with rows leaving the batch and growth past the room."""
    leave = {2: [1], 5: [0]}
    expected_logits, expected = _decode(model, DynamicCache(config=model.config), 9, leave)
    cache = ReservedCache(model.config.num_hidden_layers, reserve)
    logits, tokens = _decode(model, cache, 9, leave)
    assert tokens == expected
    for got, want in zip(logits, expected_logits, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    assert cache.get_seq_length() == 5 + 9  # prompt width + the fed tokens


def test_reserved_layer_writes_in_place_until_full() -> None:
    layer = ReservedLayer(reserve=2)
    first = torch.randn(2, 3, 4, 5)
    layer.update(first, first + 1)
    buffer = layer.capacity
    assert buffer == 6
    step = torch.randn(2, 3, 1, 5)
    keys, values = layer.update(step, step + 1)
    assert layer.capacity == buffer  # written in place, no new buffer
    torch.testing.assert_close(keys, torch.cat([first, step], -2), rtol=0, atol=0)
    torch.testing.assert_close(values, torch.cat([first, step], -2) + 1, rtol=0, atol=0)
    layer.update(step, step)
    layer.update(step, step)  # 7 positions > 6: grows, keeps what it had
    assert layer.capacity == 9 and layer.get_seq_length() == 7
    assert layer.keys is not None
    torch.testing.assert_close(layer.keys[:, :, :5], torch.cat([first, step], -2), rtol=0, atol=0)


def test_initial_prefix_is_copied_per_row(model: Any) -> None:
    """A shared prefix given expanded to the batch becomes real per-row storage."""
    prefix = [(torch.randn(1, 2, 3, 8).expand(4, -1, -1, -1),) * 2 for _ in range(2)]
    cache = ReservedCache(2, reserve=5, initial=prefix)
    assert cache.get_seq_length() == 3
    layer = cache.layers[0]
    assert isinstance(layer, ReservedLayer) and layer.capacity == 8
    torch.testing.assert_close(layer.keys, prefix[0][0], rtol=0, atol=0)
    with pytest.raises(ValueError, match="initial has 2 layers"):
        ReservedCache(3, reserve=1, initial=prefix)
    with pytest.raises(ValueError, match="reserve must be >= 0"):
        ReservedLayer(-1)


def test_the_prefix_cache_follows_weights_changed_behind_its_back(tmp_path: Path) -> None:
    """The shared-prefix KV cache is the policy's: a write that bypasses version counters (as
    Hugging Face's Trainer makes) still makes the next rollout use the new weights."""
    from gym_llm import LLMPolicy, make_text_env
    from gym_llm.testing import save_tiny_model

    model_dir = save_tiny_model(tmp_path / "m", words=["apple", "banana", "cherry", "grape"])
    env = make_text_env("gym_llm/KeywordBandit-v0")
    policy = LLMPolicy(
        env.observation_space, env.action_space, lambda _: 1e-3, model=str(model_dir),
        device="cpu", lora={"r": 4}, memoize_choice_scores=False,
    )  # fmt: skip
    assert policy.shared_prefix  # every prompt starts with the same system message
    obs = ["Options: apple, banana, cherry, grape. Target: cherry."]
    with torch.inference_mode():
        before = policy.act(obs, deterministic=True)
    with torch.no_grad():
        for name, parameter in policy.named_parameters():
            if "lora_B" in name:
                parameter.data.normal_(0.0, 0.5)  # no version bump
    with torch.inference_mode():
        after = policy.act(obs, deterministic=True)
    recomputed = policy.evaluate_actions(obs, after.actions)  # with gradients: never cached
    assert before.action_probs is not None and after.action_probs is not None
    assert abs(after.action_probs - before.action_probs).max() > 1e-3
    np.testing.assert_allclose(
        recomputed.token_log_probs[0][recomputed.mask[0]].detach().numpy(),
        after.token_log_probs[0],
        atol=1e-5,
    )


def test_the_reference_prefix_is_encoded_once_and_follows_the_frozen_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The adapter-off prefix (the action values' features) is encoded once, not per call: the
    same bits as a fresh encoding, and encoded again when a frozen weight changes."""
    from gym_llm import LLMPolicy, make_text_env
    from gym_llm.testing import save_tiny_model

    model_dir = save_tiny_model(tmp_path / "m", words=["apple", "banana", "cherry", "grape"])
    env = make_text_env("gym_llm/KeywordBandit-v0")
    policy = LLMPolicy(
        env.observation_space, env.action_space, lambda _: 1e-3, model=str(model_dir),
        device="cpu", lora={"r": 4},
    )  # fmt: skip
    runner = policy.runner
    encoded: list[int] = []
    original = runner._encode_prefix

    def counted() -> list[tuple[torch.Tensor, torch.Tensor]]:
        encoded.append(1)
        return original()

    monkeypatch.setattr(runner, "_encode_prefix", counted)
    obs = [f"Options: apple, banana, cherry, grape. Target: {w}." for w in ("cherry", "grape")]
    with torch.inference_mode():
        first = policy.prior_choice_scores(obs[:1])
        second = policy.prior_choice_scores(obs)
    assert len(encoded) == 1
    runner._reference_prefix = None  # a fresh encoding gives the same bits
    with torch.inference_mode():
        fresh = policy.prior_choice_scores(obs)
    assert len(encoded) == 2
    for a, b in zip(second, fresh, strict=True):
        assert torch.equal(a, b)
    torch.testing.assert_close(first[1][0], second[1][0])  # another batch: the last bits may differ
    frozen = next(p for p in policy.runner.lm.parameters() if not p.requires_grad)
    with torch.no_grad():
        frozen.mul_(1.5)  # a frozen weight written in place
    with torch.inference_mode():
        changed = policy.prior_choice_scores(obs)
    assert len(encoded) == 3
    assert not torch.equal(changed[0], second[0])
