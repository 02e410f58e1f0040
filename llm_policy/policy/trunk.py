"""The frozen trunk computed once per distinct prompt, for choice mode.

Where the bottom layers are frozen (``trainable_layers``) and actions are listed (choice mode),
every choice-mode pass is split at the first trainable layer: the frozen layers' output per
prompt comes from the :class:`~gym_llm.policy.trunk_cache.TrunkCache`, and the trainable layers
run on it (:meth:`gym_llm.policy.choice.ChoiceActions.top_scores`). A prompt the cache does not
hold runs the whole model once (what it cost without the cache) and its states are kept on the
way (:meth:`FrozenTrunk.keep`); :meth:`FrozenTrunk.states` computes them with a pass that stops
where the frozen layers end, for callers that want only the states. Rollouts, evaluation and the
update all run the same trainable layers on the same states, so the update's log-probs are the
rollout's to float rounding (invariant 1); a revisited observation costs only the trainable
layers (8 of SmolLM2-135M's 30 by default).

Generate mode keeps the whole-model rollout: decoding a reply needs the frozen layers' keys and
values for the prompt, ~15x the memory of their output.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from gym_llm.policy.lm import LMRunner
from gym_llm.policy.top_layers import TurnStates
from gym_llm.policy.trunk_cache import TrunkCache, run_trunk, shared_trunk_cache

#: Prompts per pass through the frozen layers when a batch has many unseen ones.
_TRUNK_BATCH = 64


def distinct_rows(keys: Sequence[str]) -> tuple[list[int], list[int]]:
    """``(rows, firsts)``: each key's row among the distinct keys (in first-seen order) and the
    first index of each distinct key.

    >>> distinct_rows(["a", "b", "a", "c"])
    ([0, 1, 0, 2], [0, 1, 3])
    """
    index: dict[str, int] = {}
    rows = [index.setdefault(k, len(index)) for k in keys]
    firsts = [0] * len(index)
    for i, row in reversed(list(enumerate(rows))):
        firsts[row] = i
    return rows, firsts


def follow_layout(mask: torch.Tensor, cand_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention mask and positions for feeding every candidate's tokens but its last after
    each of ``n`` prompts (``mask``: the prompts' full mask), in ``n * K`` rows."""
    n, k, width = mask.shape[0], cand_mask.shape[0], cand_mask.shape[1]
    full = torch.cat([mask.repeat_interleave(k, 0), cand_mask[:, :-1].repeat(n, 1)], dim=-1)
    positions = mask.sum(-1).repeat_interleave(k).unsqueeze(-1) + torch.arange(
        width - 1, device=mask.device
    )
    return full, positions


def follow_log_probs(logits: torch.Tensor, cand_ids: torch.Tensor, n: int) -> torch.Tensor:
    """``(n, K, W-1)`` log-probs of candidate tokens 2..W from the follow pass's logits."""
    k, width = cand_ids.shape
    log_dist = torch.log_softmax(logits.float(), dim=-1)  # (n*K, W-1, V)
    targets = cand_ids[:, 1:].repeat(n, 1).unsqueeze(-1)
    return log_dist.gather(-1, targets).squeeze(-1).view(n, k, width - 1)


class FrozenTrunk:
    """The trunk cache of one policy and the frozen layers' pass (a part of choice mode)."""

    def __init__(
        self, runner: LMRunner, max_mb: float, shared_identity: tuple[Any, ...] | None
    ) -> None:
        """``shared_identity``: the process's cache for that frozen trunk, else one of the
        policy's own."""
        assert runner.top is not None, "the trunk ends where the trainable layers start"
        self.runner = runner
        max_bytes = int(max_mb * 2**20)
        self.cache = (
            shared_trunk_cache(shared_identity, max_bytes)
            if shared_identity is not None
            else TrunkCache(max_bytes)
        )
        decoder = runner.top.decoder
        self._frozen = list(decoder.embed_tokens.parameters())
        for layer in decoder.layers[: runner.first_trainable_layer]:
            self._frozen.extend(layer.parameters())
        self._frozen_version = self.weights_version()

    def weights_version(self) -> int:
        """Changes when a frozen weight is written in place or moved (``.to()``)."""
        return sum(p._version + p.data_ptr() for p in self._frozen)

    def current(self) -> TrunkCache:
        """The cache, left for a fresh one of this policy's own if the frozen weights changed
        since it was filled (the owner invalidates its cache; no caller has to)."""
        version = self.weights_version()
        if version != self._frozen_version:
            self.cache = TrunkCache(self.cache.max_bytes)
            self._frozen_version = version
            self.runner.forget_trunk_prefix()
        return self.cache

    def states(
        self, prompts: Sequence[list[int]], candidates: tuple[torch.Tensor, torch.Tensor] | None
    ) -> list[TurnStates]:
        """Each prompt's frozen-layer states (and its ``candidates``'), from the cache or
        computed once for the prompts it does not hold."""
        keys = [tuple(p) for p in prompts]
        cache = self.current()
        found: dict[tuple[int, ...], TurnStates] = {}
        todo: dict[tuple[int, ...], list[int]] = {}
        for key, prompt in zip(keys, prompts, strict=True):
            if key in found or key in todo:
                continue
            hit = self.cached(key, cache)
            if hit is None:
                todo[key] = list(prompt)
            else:
                found[key] = hit
        todo_prompts = list(todo.values())
        for start in range(0, len(todo_prompts), _TRUNK_BATCH):
            chunk = todo_prompts[start : start + _TRUNK_BATCH]
            for prompt, states in zip(chunk, self._compute(chunk, candidates), strict=True):
                found[tuple(prompt)] = states
                cache.put(tuple(prompt), states)
        return [found[k] for k in keys]

    def cached(self, key: tuple[int, ...], cache: TrunkCache) -> TurnStates | None:
        """The states of the prompt ``key`` in ``cache`` (:meth:`current`) if this policy can
        use them, else ``None``."""
        hit = cache.get(key)
        return hit if hit is not None and self._usable(key, hit) else None

    @staticmethod
    def keep(key: tuple[int, ...], states: TurnStates, cache: TrunkCache) -> TurnStates:
        """Store a copy of ``states`` (computed by a whole-model pass) for the prompt ``key``;
        the copy owns its memory, so evicting it frees what it counted."""
        action = states.action.clone() if states.action is not None else None
        kept = TurnStates(states.prompt.clone(), states.offset, action)
        cache.put(key, kept)
        return kept

    def _usable(self, key: tuple[int, ...], states: TurnStates) -> bool:
        """Whether this policy can complete stored states: encoded whole, or after a prefix that
        is this policy's shared prefix (another policy sharing the cache may split otherwise)."""
        size = states.offset
        prefix = self.runner.prompts.shared_prefix
        return size == 0 or (size == len(prefix) and key[:size] == tuple(prefix))

    def _compute(
        self, prompts: list[list[int]], candidates: tuple[torch.Tensor, torch.Tensor] | None
    ) -> list[TurnStates]:
        """One pass through the frozen layers for ``prompts`` (and, for actions of several
        tokens, one for every candidate after each prompt), stopped at the first trainable
        layer."""
        from transformers import DynamicCache

        runner = self.runner
        assert runner.top is not None
        lm, layer, n = runner.lm, runner.top.first_layer, len(prompts)
        size = runner.split_prefix(prompts)
        ids, mask = runner.pad([p[size:] for p in prompts], left=True)
        width = ids.shape[1]
        if size:
            prefix_kv = runner.trunk_prefix()[1]
            rows = [(k.expand(n, -1, -1, -1), v.expand(n, -1, -1, -1)) for k, v in prefix_kv]
            cache = DynamicCache(ddp_cache_data=rows, config=lm.config)
            mask = torch.cat([torch.ones((n, size), dtype=mask.dtype, device=mask.device), mask], 1)
        else:
            cache = DynamicCache(config=lm.config)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, size:]
        hidden = run_trunk(
            lm,
            layer,
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
        )
        lengths = mask[:, size:].sum(-1).tolist()
        states = [
            TurnStates(hidden[i, width - length :].clone(), size)
            for i, length in enumerate(lengths)
        ]
        if candidates is not None and candidates[0].shape[1] > 1:
            cand_ids, cand_mask = candidates
            k, cand_width = cand_ids.shape
            cache.batch_repeat_interleave(k)
            full_mask, follow_positions = follow_layout(mask, cand_mask)
            follow = run_trunk(
                lm,
                layer,
                input_ids=cand_ids[:, :-1].repeat(n, 1),
                attention_mask=full_mask,
                position_ids=follow_positions,
                past_key_values=cache,
                use_cache=True,
            ).view(n, k, cand_width - 1, -1)
            for i, turn in enumerate(states):
                turn.action = follow[i].clone()
        return states
