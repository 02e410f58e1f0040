"""A bounded LRU store of the frozen trunk's output per prompt, and the pass that stops there.

With LoRA on the top layers only (``trainable_layers``), the layers below never change, so what
they compute for a prompt (the hidden states entering the first trainable layer) is the same
every time the prompt comes back. :class:`TrunkCache` keeps those states per prompt, keyed by the
prompt's exact token ids, least recently used first out once the bytes exceed the bound; the
policy (:mod:`gym_llm.policy.trunk`) computes what is missing with :func:`run_trunk` and runs only
the trainable layers on the rest.

A process can hold many policies on the same base model (the seeds of a sweep, an evaluation
next to training); their frozen layers are the same weights read from the same file, so
:func:`shared_trunk_cache` gives them one cache, and a state computed for one seed serves all.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from gym_llm.policy.top_layers import TurnStates

#: The default bound of a trunk cache (``LLMPolicy(trunk_cache_mb=...)``): SmolLM2-135M's
#: Blackjack (280 states) takes ~30 MB, FrozenLake ~2 MB; a text game that never repeats a prompt
#: fills it and then evicts its oldest prompts.
DEFAULT_TRUNK_CACHE_MB = 512


@dataclass
class TrunkCacheStats:
    """What a trunk cache did so far (benchmarks and the logger read it)."""

    hits: int = 0
    misses: int = 0
    evictions: int = 0

    @property
    def hit_rate(self) -> float:
        asked = self.hits + self.misses
        return self.hits / asked if asked else 0.0


class TrunkCache:
    """Prompt token ids -> :class:`TurnStates`, least recently used out first, within a byte
    bound.

    >>> cache = TrunkCache(max_bytes=2 * 4 * 3)  # room for two (2, 3) float32 prompts
    >>> for key in [(1,), (2,), (3,)]:
    ...     cache.put(key, TurnStates(torch.zeros(1, 3), 0))
    >>> cache.get((1,)) is None, cache.get((3,)) is not None, len(cache), cache.stats.evictions
    (True, True, 2, 1)
    """

    def __init__(self, max_bytes: int) -> None:
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be > 0, got {max_bytes}.")
        self.max_bytes = int(max_bytes)
        self.stats = TrunkCacheStats()
        self._entries: OrderedDict[tuple[int, ...], TurnStates] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: tuple[int, ...]) -> bool:
        return key in self._entries

    @property
    def nbytes(self) -> int:
        """Bytes the stored states take."""
        return self._bytes

    def get(self, key: tuple[int, ...]) -> TurnStates | None:
        """The states of the prompt ``key`` (now the most recently used), or ``None``."""
        states = self._entries.get(key)
        if states is None:
            self.stats.misses += 1
            return None
        self.stats.hits += 1
        self._entries.move_to_end(key)
        return states

    def put(self, key: tuple[int, ...], states: TurnStates) -> None:
        """Store ``states`` for ``key``, evicting the least recently used prompts to stay
        within the bound (states larger than the whole bound are not stored)."""
        size = states.nbytes
        if size > self.max_bytes:
            return
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old.nbytes
        while self._entries and self._bytes + size > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self._bytes -= evicted.nbytes
            self.stats.evictions += 1
        self._entries[key] = states
        self._bytes += size

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0


#: One trunk cache per frozen trunk in this process (see :func:`shared_trunk_cache`).
_SHARED: dict[tuple[Any, ...], TrunkCache] = {}


def shared_trunk_cache(identity: tuple[Any, ...], max_bytes: int) -> TrunkCache:
    """The process's trunk cache for the frozen trunk ``identity`` (model name, dtype, device,
    first trainable layer, kernels: everything that decides the states), made on first use.

    Only for models loaded by name or path: their frozen weights are the file's, so policies
    built from the same name compute the same states. A policy whose frozen weights change
    anyway leaves the shared cache for one of its own (:mod:`gym_llm.policy.trunk`)."""
    key = (*identity, int(max_bytes))
    cache = _SHARED.get(key)
    if cache is None:
        cache = _SHARED[key] = TrunkCache(max_bytes)
    return cache


def clear_shared_trunk_caches() -> None:
    """Free every shared trunk cache of this process (their policies refill them on demand)."""
    for cache in _SHARED.values():
        cache.clear()


class _TrunkDone(Exception):
    """Raised at the first trainable layer to end a pass that only needs the frozen layers."""


@contextlib.contextmanager
def _stop_at(layer: nn.Module) -> Iterator[list[torch.Tensor]]:
    captured: list[torch.Tensor] = []

    def hook(_module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        captured.append(args[0] if args else kwargs["hidden_states"])
        raise _TrunkDone

    handle = layer.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield captured
    finally:
        handle.remove()


def run_trunk(lm: Any, first_trainable: nn.Module, **inputs: Any) -> torch.Tensor:
    """The hidden states entering ``first_trainable`` for a model call with ``inputs``.

    The model's own forward runs (embeddings, masks, rotary positions, any model-specific
    scaling) and stops where the frozen layers end, so nothing above them is computed; a
    ``past_key_values`` cache gets the frozen layers' keys and values only.
    """
    with _stop_at(first_trainable) as captured, contextlib.suppress(_TrunkDone):
        lm(**inputs)
    if not captured:
        raise RuntimeError("The model call never reached its first trainable layer.")
    return captured[0]
