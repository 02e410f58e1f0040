"""The trunk cache's LRU store and the pass that stops where the frozen layers end (no policy)."""

from __future__ import annotations

import pytest
import torch

from gym_llm.policy.top_layers import TopLayers, TurnStates
from gym_llm.policy.trunk_cache import TrunkCache, run_trunk, shared_trunk_cache
from gym_llm.testing import make_tiny_model, make_tiny_tokenizer


def _states(rows: int, action_rows: int = 0) -> TurnStates:
    action = torch.zeros(action_rows, 4) if action_rows else None
    return TurnStates(torch.zeros(rows, 4), 0, action)


def test_the_least_recently_used_prompt_goes_first_and_the_bound_holds() -> None:
    cache = TrunkCache(max_bytes=3 * 16)  # three one-row prompts of 4 floats
    for key in [(1,), (2,), (3,)]:
        cache.put(key, _states(1))
    assert cache.get((1,)) is not None  # (1,) is now the most recent; (2,) the least
    cache.put((4,), _states(1))
    assert (2,) not in cache and (1,) in cache and (3,) in cache and (4,) in cache
    assert cache.nbytes == 3 * 16 and cache.stats.evictions == 1
    cache.put((5,), _states(2))  # two rows: two prompts make room
    assert cache.nbytes <= cache.max_bytes and len(cache) == 2
    assert cache.stats.evictions == 3
    assert cache.stats.hits == 1 and cache.stats.misses == 0
    assert cache.get((2,)) is None and cache.stats.misses == 1
    assert cache.stats.hit_rate == 0.5


def test_entries_count_their_candidate_states_and_oversized_ones_are_not_stored() -> None:
    cache = TrunkCache(max_bytes=100)
    cache.put((1,), _states(1, action_rows=2))
    assert cache.nbytes == 3 * 16
    cache.put((1,), _states(1))  # replaced, not counted twice
    assert cache.nbytes == 16 and len(cache) == 1
    cache.put((2,), _states(7))  # 112 bytes > the whole bound
    assert (2,) not in cache and len(cache) == 1
    cache.clear()
    assert len(cache) == 0 and cache.nbytes == 0
    with pytest.raises(ValueError, match="max_bytes"):
        TrunkCache(0)


def test_policies_on_the_same_frozen_trunk_share_one_cache() -> None:
    first = shared_trunk_cache(("model-a", "float32", "cpu", 3, True), 2**20)
    assert shared_trunk_cache(("model-a", "float32", "cpu", 3, True), 2**20) is first
    assert shared_trunk_cache(("model-a", "bfloat16", "cpu", 3, True), 2**20) is not first
    assert shared_trunk_cache(("model-a", "float32", "cpu", 2, True), 2**20) is not first


def test_run_trunk_returns_what_enters_the_first_trainable_layer() -> None:
    tokenizer = make_tiny_tokenizer()
    model = make_tiny_model(len(tokenizer), layers=4)
    top = TopLayers(model, 2)
    ids = torch.randint(5, 80, (2, 7), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        with top.capture() as captured:
            logits = model(input_ids=ids).logits
        calls: list[int] = []
        handle = model.model.layers[3].register_forward_hook(lambda *_: calls.append(1))
        stopped = run_trunk(model, top.first_layer, input_ids=ids)
        handle.remove()
        finished = top.logits(
            top(stopped, torch.ones_like(ids), torch.arange(7).expand(2, -1), None)
        )
    assert calls == []  # nothing above the frozen layers ran
    torch.testing.assert_close(stopped, captured[0], atol=0, rtol=0)
    torch.testing.assert_close(finished, logits, atol=1e-5, rtol=0)
