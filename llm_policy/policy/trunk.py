"""The frozen trunk computed once per distinct prompt, and choice scores from the top layers.

A layer of the policy between the prompt encoding and action scoring. Where the bottom layers
are frozen (``trainable_layers``) and actions are listed (choice mode), every choice-mode pass
is split at the first trainable layer: the frozen layers' output per prompt comes from the
:class:`~gym_llm.policy.trunk_cache.TrunkCache`, and the trainable layers run on it
(:meth:`TrunkPasses._top_choice`). A prompt the cache does not hold runs the whole model once
(what it cost without the cache) and its states are kept on the way
(:meth:`TrunkPasses.keep_trunk`); :meth:`TrunkPasses.trunk_states` computes them with a pass that
stops where the frozen layers end, for callers that want only the states. Rollouts,
evaluation and the update all call the same :meth:`TrunkPasses._top_choice` on the same states,
so the update's log-probs are the rollout's to float rounding (invariant 1); a revisited
observation costs only the trainable layers (8 of SmolLM2-135M's 30 by default).

Generate mode keeps the whole-model rollout: decoding a reply needs the frozen layers' keys and
values for the prompt, ~15x the memory of their output.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from gym_llm.policy.encoding import PromptEncoding
from gym_llm.policy.top_layers import TurnStates, pad_states
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


class TrunkPasses(PromptEncoding):
    """The trunk cache, the frozen layers' pass, and choice scores from the trainable layers."""

    action_mode: str
    first_trainable_layer: int
    temperature: float
    choice_normalization: str
    #: Choice mode: each action's score under a content-free prompt, subtracted from its score.
    choice_calibration: torch.Tensor | None
    #: Choice mode: the candidates' token ids and mask, ``(K, width)`` each.
    _candidates: tuple[torch.Tensor, torch.Tensor] | None
    _prefix_states: torch.Tensor | None
    #: The frozen layers' keys and values over the shared prefix (computed once).
    _trunk_prefix_kv: list[tuple[torch.Tensor, torch.Tensor]] | None
    #: The trainable layers' keys and values over the shared prefix, per weights version.
    _top_prefix: tuple[tuple[int, float], list[tuple[torch.Tensor, torch.Tensor]]] | None
    trunk_cache: TrunkCache | None
    _frozen: list[torch.nn.Parameter]
    _frozen_version: int

    def _init_trunk(self, max_mb: float, shared_identity: tuple[Any, ...] | None) -> None:
        """Set up the trunk cache (``max_mb <= 0``: none; ``shared_identity``: the process's
        cache for that frozen trunk, else one of the policy's own)."""
        self._prefix_states, self._trunk_prefix_kv, self._top_prefix = None, None, None
        self.trunk_cache_mb = float(max_mb)
        self.trunk_cache = None
        if max_mb <= 0 or self.top is None or self.action_mode != "choice":
            return
        max_bytes = int(max_mb * 2**20)
        self.trunk_cache = (
            shared_trunk_cache(shared_identity, max_bytes)
            if shared_identity is not None
            else TrunkCache(max_bytes)
        )
        self._frozen = self._frozen_parameters()
        self._frozen_version = self._trunk_weights_version()

    def invalidate_prefix_cache(self) -> None:
        super().invalidate_prefix_cache()
        self._top_prefix = None

    @property
    def uses_trunk_cache(self) -> bool:
        """Whether choice-mode passes without gradients start from cached frozen-layer states."""
        return self.trunk_cache is not None and self.uses_rollout_states

    def _frozen_parameters(self) -> list[torch.nn.Parameter]:
        assert self.top is not None
        decoder = self.top.decoder
        params = list(decoder.embed_tokens.parameters())
        for layer in decoder.layers[: self.first_trainable_layer]:
            params.extend(layer.parameters())
        return params

    def _trunk_weights_version(self) -> int:
        """Changes when a frozen weight is written in place or moved (``.to()``)."""
        return sum(p._version + p.data_ptr() for p in self._frozen)

    def _trunk(self) -> TrunkCache:
        """The cache, left for a fresh one of this policy's own if the frozen weights changed
        since it was filled (the owner invalidates its cache; no caller has to)."""
        assert self.trunk_cache is not None
        version = self._trunk_weights_version()
        if version != self._frozen_version:
            self.trunk_cache = TrunkCache(self.trunk_cache.max_bytes)
            self._frozen_version = version
            self._prefix_states = self._trunk_prefix_kv = self._top_prefix = None
        return self.trunk_cache

    def trunk_states(self, observations: Sequence[str]) -> list[TurnStates]:
        """Each observation's frozen-layer states (prompt, and candidates in choice mode), from
        the cache or computed once for the prompts it does not hold."""
        prompts = [self.prompt_ids(str(o)) for o in observations]
        keys = [tuple(p) for p in prompts]
        cache = self._trunk()
        found: dict[tuple[int, ...], TurnStates] = {}
        todo: dict[tuple[int, ...], list[int]] = {}
        for key, prompt in zip(keys, prompts, strict=True):
            if key in found or key in todo:
                continue
            hit = self.cached_trunk(key, cache)
            if hit is None:
                todo[key] = prompt
            else:
                found[key] = hit
        todo_prompts = list(todo.values())
        for start in range(0, len(todo_prompts), _TRUNK_BATCH):
            chunk = todo_prompts[start : start + _TRUNK_BATCH]
            for prompt, states in zip(chunk, self._compute_trunk(chunk), strict=True):
                found[tuple(prompt)] = states
                cache.put(tuple(prompt), states)
        return [found[k] for k in keys]

    def cached_trunk(self, key: tuple[int, ...], cache: TrunkCache) -> TurnStates | None:
        """The states of the prompt ``key`` in ``cache`` (:meth:`_trunk`) if this policy can
        use them, else ``None``."""
        hit = cache.get(key)
        return hit if hit is not None and self._usable(key, hit) else None

    def keep_trunk(self, key: tuple[int, ...], states: TurnStates, cache: TrunkCache) -> TurnStates:
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
        return size == 0 or (size == len(self.shared_prefix) and key[:size] == self._prefix_key)

    @property
    def _prefix_key(self) -> tuple[int, ...]:
        return tuple(self.shared_prefix)

    def _compute_trunk(self, prompts: list[list[int]]) -> list[TurnStates]:
        """One pass through the frozen layers for ``prompts`` (and, for actions of several
        tokens, one for every candidate after each prompt), stopped at the first trainable
        layer."""
        from transformers import DynamicCache

        assert self.top is not None
        layer, n = self.top.first_layer, len(prompts)
        size = self._split_prefix(prompts)
        ids, mask = self._pad([p[size:] for p in prompts], left=True)
        width = ids.shape[1]
        if size:
            prefix_kv = self._trunk_prefix()[1]
            rows = [(k.expand(n, -1, -1, -1), v.expand(n, -1, -1, -1)) for k, v in prefix_kv]
            cache = DynamicCache(ddp_cache_data=rows, config=self.lm.config)
            mask = torch.cat([torch.ones((n, size), dtype=mask.dtype, device=mask.device), mask], 1)
        else:
            cache = DynamicCache(config=self.lm.config)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, size:]
        hidden = run_trunk(
            self.lm,
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
        if self._candidates is not None and self._candidates[0].shape[1] > 1:
            cand_ids = self._candidates[0]
            k, cand_width = cand_ids.shape
            cache.batch_repeat_interleave(k)
            full_mask, follow_positions = self._follow_layout(mask)
            follow = run_trunk(
                self.lm,
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

    def _trunk_prefix(self) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """The shared prefix's frozen-layer output ``(P, d)`` and its keys and values in the
        frozen layers: computed once (the layers below never change), outside inference mode
        so that the update can use them."""
        from transformers import DynamicCache

        assert self.top is not None
        if self._prefix_states is None or self._trunk_prefix_kv is None:
            ids = torch.tensor([self.shared_prefix], dtype=torch.long, device=self.device)
            with torch.inference_mode(False), torch.no_grad():
                cache: Any = DynamicCache(config=self.lm.config)
                hidden = run_trunk(
                    self.lm, self.top.first_layer, input_ids=ids, past_key_values=cache
                )
                self._prefix_states = hidden[0].clone()
                self._trunk_prefix_kv = [
                    (layer.keys, layer.values)
                    for layer in cache.layers[: self.first_trainable_layer]
                ]
        return self._prefix_states, self._trunk_prefix_kv

    def _prefix_hidden(self) -> torch.Tensor:
        """The first trainable layer's input over the shared prefix, ``(P, d)``."""
        return self._trunk_prefix()[0]

    def _suffix_states(self, turn: TurnStates, size: int) -> torch.Tensor:
        """A turn's prompt states after the first ``size`` tokens (the batch's shared prefix)."""
        if turn.offset == size:
            return turn.prompt
        if turn.offset == 0:  # the prompt was encoded whole; this batch shares the prefix
            return turn.prompt[size:]
        return torch.cat([self._prefix_hidden(), turn.prompt])  # the other way round

    def _top_prefix_cache(self, n: int) -> Any:
        """The trainable layers' cache over the shared prefix for ``n`` rows: encoded once per
        :meth:`weights_version` without gradients, per call with them (their gradients flow
        back through it) and in the reference model (adapter off)."""
        assert self.top is not None
        if torch.is_grad_enabled() or self._reference_mode:
            layers = self.top.encode_prefix(self._prefix_hidden())
        else:
            version = self.weights_version()
            if self._top_prefix is None or self._top_prefix[0] != version:
                self._top_prefix = (version, self.top.encode_prefix(self._prefix_hidden()))
            layers = self._top_prefix[1]
        return self.top.prefix_cache(layers, n)

    def _top_choice(
        self, states: Sequence[TurnStates], size: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(n, K)`` action logits and ``(n,)`` values of the trainable layers on ``states``
        (the prompts' shared prefix of ``size`` tokens in a cache), with gradients if enabled."""
        top, candidates = self.top, self._candidates
        assert top is not None and candidates is not None
        cand_ids = candidates[0]
        hidden, mask, width = pad_states([self._suffix_states(t, size) for t in states])
        n = hidden.shape[0]
        if size:
            mask = torch.cat([torch.ones((n, size), dtype=mask.dtype, device=mask.device), mask], 1)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, size:]
        multi_token = cand_ids.shape[1] > 1
        cache: Any = (
            self._top_prefix_cache(n) if size else (top.new_cache() if multi_token else None)
        )
        final = top(hidden, mask, positions, cache)
        # the head reads the first trainable layer's input: the states the top layers start from
        head_input = hidden[:, width - 1].float()
        values = self._values(final[:, width - 1].float(), head_input)
        first = torch.log_softmax(top.logits(final[:, width - 1]).float(), dim=-1)
        token_lp = first[:, cand_ids[:, 0]].unsqueeze(-1)
        if multi_token:
            k, cand_width = cand_ids.shape
            cache.batch_repeat_interleave(k)
            follow = torch.stack([t.action for t in states])  # type: ignore[misc]
            follow = follow.reshape(n * k, cand_width - 1, -1).clone()
            full_mask, follow_positions = self._follow_layout(mask)
            out = top(follow, full_mask, follow_positions, cache)
            token_lp = torch.cat([token_lp, self._follow_log_probs(top.logits(out), n)], dim=-1)
        return self._scores(token_lp, head_input), values

    def _follow_layout(self, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Attention mask and positions for feeding every candidate's tokens but its last after
        each of ``n`` prompts (``mask``: the prompts' full mask), in ``n * K`` rows."""
        assert self._candidates is not None
        cand_mask = self._candidates[1]
        n, k, width = mask.shape[0], cand_mask.shape[0], cand_mask.shape[1]
        full = torch.cat([mask.repeat_interleave(k, 0), cand_mask[:, :-1].repeat(n, 1)], dim=-1)
        positions = mask.sum(-1).repeat_interleave(k).unsqueeze(-1) + torch.arange(
            width - 1, device=mask.device
        )
        return full, positions

    def _follow_log_probs(self, logits: torch.Tensor, n: int) -> torch.Tensor:
        """``(n, K, W-1)`` log-probs of candidate tokens 2..W from the follow pass's logits."""
        assert self._candidates is not None
        cand_ids = self._candidates[0]
        k, width = cand_ids.shape
        log_dist = torch.log_softmax(logits.float(), dim=-1)  # (n*K, W-1, V)
        targets = cand_ids[:, 1:].repeat(n, 1).unsqueeze(-1)
        return log_dist.gather(-1, targets).squeeze(-1).view(n, k, width - 1)

    def _scores(
        self, token_lp: torch.Tensor, features: torch.Tensor, head: bool = True
    ) -> torch.Tensor:
        """``(n, K, width)`` candidate token log-probs and ``(n, d)`` action-head inputs
        (:meth:`_head_layer`) -> ``(n, K)`` action logits (plus the head's, when there is one
        and ``head``)."""
        assert self._candidates is not None
        cand_mask = self._candidates[1]
        scores = (token_lp * cand_mask.unsqueeze(0)).sum(-1)
        if self.choice_normalization == "mean":
            scores = scores / cand_mask.sum(-1).unsqueeze(0)
        if self.choice_calibration is not None:
            scores = scores - self.choice_calibration.to(scores.device, scores.dtype)
        scores = scores / self.temperature
        if self.action_head is not None and head:
            scores = scores + self.action_head(features)
        return scores
