"""The LM runner: prompt ids -> one batched pass through the model, shared by both action modes.

It owns what makes passes cheap without changing their numbers: the shared prefix's KV cache
(per :meth:`LMRunner.weights_version`, so no caller ever has to invalidate it), the trainable
layers' cache over that prefix, the frozen layers' output over it, the packed frozen weights for
rollouts, and the capture of each turn's states at the first trainable layer for an update that
starts there (:mod:`gym_llm.policy.top_layers`). The reference model (adapter off) runs through
:meth:`LMRunner.reference`, where no cache computed with the adapter on is used.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor

from gym_llm.policy.action_head import ActionHead
from gym_llm.policy.kv_cache import ReservedCache
from gym_llm.policy.outputs import UpdateWork
from gym_llm.policy.packed_linear import PackedLinears
from gym_llm.policy.prompts import PromptBuilder
from gym_llm.policy.top_layers import TopLayers, TurnStates, num_layers
from gym_llm.policy.trunk_cache import run_trunk
from gym_llm.policy.value_head import ValueHead


class LMRunner:
    """Batched passes of the causal LM over prompts (a part of :class:`gym_llm.LLMPolicy`)."""

    def __init__(
        self,
        lm: Any,
        prompts: PromptBuilder,
        value_head: ValueHead,
        action_head: ActionHead | None,
        *,
        first_trainable_layer: int,
        centred_critic: bool,
        gradient_checkpointing: bool,
        reuse_rollout_states: bool,
        pack_frozen_weights: bool,
        top: TopLayers | None,
    ) -> None:
        self.lm = lm
        self.prompts = prompts
        self.value_head = value_head
        #: The action head (``None``: off); the centred critic reads its standardised input.
        self.action_head = action_head
        self.centred_critic = centred_critic
        #: 0: every layer trains; else the first layer that does (the ones below are frozen).
        self.first_trainable_layer = first_trainable_layer
        self.gradient_checkpointing = gradient_checkpointing
        self.reuse_rollout_states = reuse_rollout_states
        self.pack_frozen_weights = pack_frozen_weights
        #: The trainable layers as a model of their own, where the update can start there.
        self.top = top
        #: Passes run the reference model (adapter off): no cache of the adapter's is used.
        self.reference_mode = False
        #: Running count of what the update computed (benchmarks read and reset it).
        self.update_work = UpdateWork()
        self._states_wanted = True
        self._optimizer: torch.optim.Optimizer | None = None
        self._packed: PackedLinears | None = None  # built on the first rollout with packing on
        self._prefix_kv: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        self._prefix_version: tuple[int, float] | None = None
        #: The trainable layers' keys and values over the shared prefix, per weights version.
        self._top_prefix: tuple[tuple[int, float], list[tuple[torch.Tensor, torch.Tensor]]] | None
        self._top_prefix = None
        self._prefix_states: torch.Tensor | None = None
        #: The frozen layers' keys and values over the shared prefix (computed once).
        self._trunk_prefix_kv: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        #: The reference model's (adapter off) keys and values over the shared prefix, with the
        #: prefix, device and frozen weights' versions they were computed for: the adapter's
        #: training never changes them.
        self._reference_prefix: tuple[Any, list[tuple[torch.Tensor, torch.Tensor]]] | None = None

    @property
    def device(self) -> torch.device:
        return torch.device(self.lm.device)

    def track(self, optimizer: torch.optim.Optimizer) -> None:
        """The optimizer whose parameters are what trains (:meth:`weights_version`)."""
        self._optimizer = optimizer

    # --- versions and caches -------------------------------------------------------------------

    def weights_version(self) -> tuple[int, float]:
        """Changes whenever a trainable weight does, so the caches computed with the old weights
        (the prefix KV cache, the remembered choice scores) are dropped by their owner, never by
        a caller who might forget.

        Version counters alone miss writes that bypass them (Hugging Face's Trainer, as used by
        SFT, updates weights without bumping them: measured; ``p.data`` writes too), so a
        fingerprint of the trainable tensors' values is part of it: their norms, in one fused
        call and one sync (the sum of sums would miss updates that cancel out)."""
        assert self._optimizer is not None, "LLMPolicy tracks its optimizer when it builds it"
        params = [p for group in self._optimizer.param_groups for p in group["params"]]
        counters = sum(p._version for p in params)
        with torch.no_grad():
            # This process's shard of a sharded weight: a local fingerprint needs no collective.
            local = [p.to_local() if isinstance(p, DTensor) else p for p in params]
            norms = torch._foreach_norm([p.detach() for p in local])
            if not norms:
                return counters, 0.0
            stacked = torch.stack(norms).double()
            # Weighted by position, so two tensors trading norms still changes the sum.
            weights = torch.arange(1, len(norms) + 1, dtype=stacked.dtype, device=stacked.device)
            fingerprint = float((stacked * weights).sum())
        return counters, fingerprint

    def invalidate(self) -> None:
        """Forget what was computed with the current weights (never needed for correctness:
        the caches follow :meth:`weights_version`; it frees their memory)."""
        self._prefix_kv = None
        self._top_prefix = None

    def forget_trunk_prefix(self) -> None:
        """The frozen layers changed: their output over the prefix, and what the trainable layers
        computed from it, are stale."""
        self._prefix_states = self._trunk_prefix_kv = self._top_prefix = None
        self._reference_prefix = None

    @contextlib.contextmanager
    def reference(self) -> Iterator[None]:
        """Passes inside run the reference model: the adapter off, no cache computed with it on."""
        self.reference_mode = True
        try:
            with self.lm.disable_adapter():
                yield
        finally:
            self.reference_mode = False

    def rollout_kernels(self) -> contextlib.AbstractContextManager[None]:
        """The block inside which no-gradient passes use the packed frozen weights (if on)."""
        if not self.pack_frozen_weights:
            return contextlib.nullcontext()
        if self._packed is None:
            self._packed = PackedLinears(self.lm)
        return self._packed.active()

    @property
    def packed_weight_bytes(self) -> int:
        """Memory the packed frozen weights in use hold (0 with packing off)."""
        return self._packed.packed_bytes if self.pack_frozen_weights and self._packed else 0

    # --- the shared prefix ---------------------------------------------------------------------

    def split_prefix(self, prompts: Sequence[list[int]]) -> int:
        """Length of the shared prefix usable for this batch (0: encode prompts whole)."""
        prefix = self.prompts.shared_prefix
        if not prefix or (self.lm.training and self.gradient_checkpointing):
            # Checkpointed layers drop past_key_values, so training must not rely on a cache.
            return 0
        size = len(prefix)
        shared = all(len(p) > size and p[:size] == prefix for p in prompts)
        if torch.is_grad_enabled() and isinstance(self.lm, FSDPModule):
            # A sharded update runs the same passes in every process (FSDP gathers each layer
            # in each pass), so the prefix pass runs only where every process can use it.
            # Every process calls this as often as the others (gym_llm.rl.common.sharding).
            flag = torch.tensor([int(shared)], device=self.device)
            dist.all_reduce(flag, op=dist.ReduceOp.MIN)
            shared = bool(flag.item())
        return size if shared else 0

    def prefix_cache(self, n: int, reserve: int | None = None) -> Any:
        """A KV cache holding the shared prefix for ``n`` rows (with ``reserve`` free positions
        after it in a :class:`ReservedCache` if given, else a ``DynamicCache``).

        Without gradients (rollouts, evaluation) the prefix is encoded once per
        :meth:`weights_version` and reused across steps, and once per run in the reference
        model (adapter off), which training never changes. With gradients it is encoded once per
        micro-batch, and the gradients of every row flow back through that one pass.
        """
        from transformers import DynamicCache

        if torch.is_grad_enabled():
            layers = self._encode_prefix()
        elif self.reference_mode:
            frozen = sum(
                p._version + p.data_ptr() for p in self.lm.parameters() if not p.requires_grad
            )
            key = (tuple(self.prompts.shared_prefix), self.device, frozen)
            if self._reference_prefix is None or self._reference_prefix[0] != key:
                self._reference_prefix = (key, self._encode_prefix())
            layers = self._reference_prefix[1]
        else:
            version = self.weights_version()
            if self._prefix_kv is None or version != self._prefix_version:
                self._prefix_kv, self._prefix_version = self._encode_prefix(), version
            layers = self._prefix_kv
        rows = [(k.expand(n, -1, -1, -1), v.expand(n, -1, -1, -1)) for k, v in layers]
        if reserve is not None:
            return ReservedCache(len(layers), reserve, initial=rows)
        return DynamicCache(ddp_cache_data=rows, config=self.lm.config)

    def _encode_prefix(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        ids = torch.tensor([self.prompts.shared_prefix], dtype=torch.long, device=self.device)
        out = self.lm(input_ids=ids, use_cache=True, logits_to_keep=1)
        return [(layer.keys, layer.values) for layer in out.past_key_values.layers]

    def trunk_prefix(self) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """The shared prefix's frozen-layer output ``(P, d)`` and its keys and values in the
        frozen layers: computed once (the layers below never change), outside inference mode
        so that the update can use them."""
        from transformers import DynamicCache

        assert self.top is not None
        if self._prefix_states is None or self._trunk_prefix_kv is None:
            ids = torch.tensor([self.prompts.shared_prefix], dtype=torch.long, device=self.device)
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

    def suffix_states(self, turn: TurnStates, size: int) -> torch.Tensor:
        """A turn's prompt states after the first ``size`` tokens (the batch's shared prefix)."""
        if turn.offset == size:
            return turn.prompt
        if turn.offset == 0:  # the prompt was encoded whole; this batch shares the prefix
            return turn.prompt[size:]
        return torch.cat([self.trunk_prefix()[0], turn.prompt])  # the other way round

    def top_prefix_cache(self, n: int) -> Any:
        """The trainable layers' cache over the shared prefix for ``n`` rows: encoded once per
        :meth:`weights_version` without gradients, per call with them (their gradients flow
        back through it) and in the reference model (adapter off)."""
        assert self.top is not None
        if torch.is_grad_enabled() or self.reference_mode:
            layers = self.top.encode_prefix(self.trunk_prefix()[0])
        else:
            version = self.weights_version()
            if self._top_prefix is None or self._top_prefix[0] != version:
                self._top_prefix = (version, self.top.encode_prefix(self.trunk_prefix()[0]))
            layers = self._top_prefix[1]
        return self.top.prefix_cache(layers, n)

    def count_update(self, tokens: int, head_rows: int, size: int, from_states: bool) -> None:
        """Add one update pass to :attr:`update_work`: ``tokens`` after the shared prefix of
        ``size`` tokens (computed once per pass), through the trainable layers only when the
        pass starts from stored states."""
        total = num_layers(self.lm)
        layers = total - self.first_trainable_layer if from_states else total
        tokens += size  # the shared prefix, once per pass
        self.update_work.token_layers += tokens * layers
        self.update_work.head_rows += head_rows
        self.update_work.tokens += tokens

    # --- passes --------------------------------------------------------------------------------

    def pad(
        self, seqs: Sequence[Sequence[int] | np.ndarray], *, left: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Token sequences as a padded ``(n, width)`` id matrix plus attention mask."""
        width = max(len(s) for s in seqs)
        pad_id = int(self.prompts.tokenizer.pad_token_id)
        ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, seq in enumerate(seqs):
            cols = slice(width - len(seq), width) if left else slice(0, len(seq))
            ids[i, cols] = torch.as_tensor(np.asarray(seq, dtype=np.int64))
            mask[i, cols] = 1
        return ids.to(self.device), mask.to(self.device)

    def encode_prompts(
        self,
        observations: Sequence[str],
        extra: tuple[torch.Tensor, torch.Tensor] | None = None,
        reserve: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, Any, int]:
        """Inputs for one batched pass: (ids, full attention mask, position ids, cache, width).

        ``ids`` are the left-padded prompt suffixes (after the shared prefix, which lives in
        ``cache``), followed by ``extra`` columns if given (e.g. replies); the mask covers prefix,
        suffix and extra columns. ``width`` is the number of prompt columns in ``ids``, so the last
        prompt token is column ``width - 1``. Pads sit between prefix and suffix, masked out,
        with positions counting only real tokens. ``reserve``: the cache is a
        :class:`ReservedCache` with room for the prompt and ``reserve`` more tokens.
        """
        prompts = [self.prompts.prompt_ids(str(o)) for o in observations]
        size = self.split_prefix(prompts)
        ids, mask = self.pad([p[size:] for p in prompts], left=True)
        width = ids.shape[1]
        if extra is not None:
            ids, extra_mask = torch.cat([ids, extra[0]], -1), extra[1]
            mask = torch.cat([mask, extra_mask], -1)
        if size:
            ones = torch.ones((len(prompts), size), dtype=mask.dtype, device=self.device)
            mask = torch.cat([ones, mask], -1)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, size:]
        if size:
            # The prefix is the cache's first write, so its room must cover the prompt suffix too.
            room = None if reserve is None else ids.shape[1] + reserve
            cache = self.prefix_cache(len(prompts), room)
        elif reserve is not None:  # the prompt itself is the first write
            cache = ReservedCache(int(self.lm.config.get_text_config().num_hidden_layers), reserve)
        else:
            cache = None
        return ids, mask, positions, cache, width

    @property
    def uses_rollout_states(self) -> bool:
        """Whether rollouts keep states and the update starts at the first trainable layer."""
        return (
            self.top is not None and self.reuse_rollout_states and not self.gradient_checkpointing
        )

    def starts_from(self, states: Sequence[TurnStates | None] | None) -> bool:
        """Whether an update pass can start from these stored states at the first trainable
        layer (every turn kept them), instead of running the whole model."""
        return (
            self.uses_rollout_states and states is not None and all(s is not None for s in states)
        )

    def collects_states(self) -> bool:
        """Whether model calls now keep states for the update: rollouts (no gradients) of a
        policy whose update starts from them, outside evaluation."""
        return self.uses_rollout_states and self._states_wanted and not torch.is_grad_enabled()

    def capturing(self) -> contextlib.AbstractContextManager[list[torch.Tensor]]:
        """Collects the first trainable layer's inputs of the model calls inside (see
        :meth:`collects_states`); elsewhere a no-op yielding an empty list."""
        if self.top is None or not self.collects_states():
            return contextlib.nullcontext([])
        return self.top.capture()

    def without_states(self) -> contextlib.AbstractContextManager[None]:
        """Calls inside keep no states (evaluation: nothing will be trained on them)."""
        return self.keeping_states(False)

    @contextlib.contextmanager
    def keeping_states(self, wanted: bool) -> Iterator[None]:
        """Calls inside keep states or not, as ``wanted`` (the trunk cache keeps them even in
        evaluation)."""
        before, self._states_wanted = self._states_wanted, wanted
        try:
            yield
        finally:
            self._states_wanted = before

    def values(self, final: torch.Tensor, head_input: torch.Tensor | None = None) -> torch.Tensor:
        """``(n,)`` critic values from the last prompt token: its final hidden state ``final``,
        or with ``centred_critic`` the action head's centred, scaled input ``head_input``."""
        head = self.action_head
        if self.centred_critic and head is not None:
            assert head_input is not None, "the centred critic reads the head's features"
            final = head.standardise(head_input)
        values: torch.Tensor = self.value_head(final.float()).squeeze(-1)
        return values

    def head_layer(self, n_hidden_states: int) -> int:
        """The ``hidden_states`` index the action head reads: the first trainable layer's input
        (frozen, cached, 2-6x fewer steps to fit than the final layer), else the final one."""
        first = self.first_trainable_layer
        return first if first else n_hidden_states - 1

    def prompt_pass(
        self, observations: Sequence[str], reserve: int | None = None
    ) -> tuple[
        torch.Tensor, torch.Tensor, Any, torch.Tensor, list[TurnStates] | None, torch.Tensor
    ]:
        """Run the prompts once: next-token logits, values, KV cache, the full mask, (when
        collected) each row's states for the update, and the action head's input (the last
        prompt token's hidden state at :meth:`head_layer`)."""
        ids, mask, positions, cache, _ = self.encode_prompts(observations, reserve=reserve)
        with self.capturing() as captured:
            out = self.lm(
                input_ids=ids,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
                output_hidden_states=True,
                logits_to_keep=1,
            )
        last_hidden = out.hidden_states[-1][:, -1].float()
        head_input = out.hidden_states[self.head_layer(len(out.hidden_states))][:, -1].float()
        values = self.values(last_hidden, head_input)
        states = None
        if captured:
            offset, width = mask.shape[1] - ids.shape[1], ids.shape[1]
            lengths = mask[:, offset:].sum(-1).tolist()
            states = [
                TurnStates(captured[0][i, width - length :], offset)
                for i, length in enumerate(lengths)
            ]
        return out.logits[:, -1], values, out.past_key_values, mask, states, head_input
