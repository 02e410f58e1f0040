"""The policy's first layer: observation -> prompt token ids -> one batched pass over the prompts.

The prompt part every observation shares (system message, instruction) is encoded once and its KV
cache reused; the cache belongs to the policy and follows :meth:`PromptEncoding.weights_version`,
so no caller ever has to invalidate it. :class:`gym_llm.policy.scoring.ActionScoring` builds on
this layer, :class:`gym_llm.policy.update.UpdatePasses` on that one, and
:class:`gym_llm.policy.llm_policy.LLMPolicy` (which sets every attribute declared here) on top.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from stable_baselines3.common.policies import BasePolicy
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor

from gym_llm.policy.kv_cache import ReservedCache
from gym_llm.policy.packed_linear import PackedLinears
from gym_llm.policy.prompts import (
    RepliesLostError,
    build_conversation,
    build_messages,
    parse_conversation,
    render_prompt,
    spliced_prompt_ids,
)
from gym_llm.policy.top_layers import TopLayers, TurnStates
from gym_llm.replies import Reply, conversation_json
from gym_llm.text import cut_middle

#: Shorter shared prefixes are not worth a separate pass.
_MIN_SHARED_PREFIX = 8
#: The memoised prompt token ids are dropped when they hold more tokens than this (~40 MB).
PROMPT_CACHE_MAX_TOKENS = 1_000_000


class PromptEncoding(BasePolicy):
    """Prompts, the shared-prefix KV cache and the prompt pass (see the module docstring)."""

    lm: Any
    tokenizer: Any
    value_head: torch.nn.Linear
    #: Choice mode's linear action head on centred features (``None``: off).
    action_head: Any
    centred_critic: bool  # the critic reads the action head's centred features
    first_trainable_layer: int | None  # 0 or None: every layer trains
    conversation: bool
    system_prompt: str | None
    max_prompt_tokens: int | None
    truncated_prompts: int
    actions_list: tuple[str, ...]
    gradient_checkpointing: bool
    reuse_rollout_states: bool
    pack_frozen_weights: bool
    share_prefix: bool
    shared_prefix: list[int]
    #: The trainable layers as a model of their own, where the update can start there.
    top: TopLayers | None
    _choice_replies: list[Reply]
    _prompt_cache: dict[str, list[int]]
    _prompt_cache_tokens: int
    _prefix_kv: list[tuple[torch.Tensor, torch.Tensor]] | None
    _prefix_version: tuple[int, float] | None
    _packed: PackedLinears | None
    _reference_mode: bool
    _states_wanted: bool

    @property
    def device(self) -> torch.device:
        return torch.device(self.lm.device)

    def _stop_token_ids(self) -> list[int]:
        ids = {self.tokenizer.eos_token_id}
        configured = getattr(getattr(self.lm, "generation_config", None), "eos_token_id", None)
        if isinstance(configured, int):
            ids.add(configured)
        elif isinstance(configured, list | tuple):
            ids.update(configured)
        return sorted(i for i in ids if i is not None)

    def _tokenize_candidates(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The candidates' padded ids and mask; also sets :attr:`_choice_replies`, each action as
        the reply it is sent as (its text carrying the tokens that were scored)."""
        encoded = [
            self.tokenizer(action, add_special_tokens=False)["input_ids"]
            for action in self.actions_list
        ]
        if any(len(ids) == 0 for ids in encoded):
            raise ValueError(f"Some actions tokenize to nothing: {self.actions_list!r}.")
        self._choice_replies = [
            Reply(a, ids) for a, ids in zip(self.actions_list, encoded, strict=True)
        ]
        return self._pad(encoded, left=False)

    def prompt_text(self, observation: str) -> str:
        """The exact prompt the model sees for ``observation``."""
        build = build_conversation if self.conversation else build_messages
        messages = build(observation, self.observation_space, self.action_space, self.system_prompt)
        return render_prompt(self.tokenizer, messages)

    def prompt_ids(self, observation: str) -> list[int]:
        """Token ids of the prompt, memoised: envs revisit the same observations constantly."""
        ids = self._prompt_cache.get(observation)
        if ids is None:
            ids = self._whole_prompt_ids(observation)
            budget = self.max_prompt_tokens
            if budget is not None and len(ids) > budget:
                ids = self._fitted(observation, budget)
                self.truncated_prompts += 1
            # Bounded by the tokens it holds: text games and conversations rarely repeat a
            # prompt, and 100,000 long prompts held as Python ints were gigabytes.
            self._prompt_cache_tokens += len(ids)
            if self._prompt_cache_tokens > PROMPT_CACHE_MAX_TOKENS:
                self._prompt_cache.clear()
                self._prompt_cache_tokens = len(ids)
            self._prompt_cache[observation] = ids
        return ids

    def _whole_prompt_ids(self, observation: str) -> list[int]:
        """Token ids of the prompt, uncut; in a conversation the earlier replies that carry
        their sampled ids (:class:`gym_llm.replies.Reply`) keep them exactly."""
        build = build_conversation if self.conversation else build_messages
        messages = build(observation, self.observation_space, self.action_space, self.system_prompt)
        if self.conversation:
            try:
                ids = spliced_prompt_ids(self.tokenizer, messages, self._encode)
            except RepliesLostError as error:
                warnings.warn(
                    f"Earlier replies are re-encoded from their text in this prompt, so they may "
                    f"not be the tokens the model sampled: {error}. Use a chat template that "
                    "writes each message's content unchanged.",
                    stacklevel=2,
                )
                ids = None
            if ids is not None:
                return ids
        return self._encode(render_prompt(self.tokenizer, messages))

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _fitted(self, observation: str, budget: int) -> list[int]:
        """Prompt ids of ``observation`` within ``budget`` tokens (see ``max_prompt_tokens``):
        a conversation drops its oldest exchanges after the first observation; what is still too
        long has its latest observation's middle cut (head: rules; tail: latest state)."""
        turns = parse_conversation(observation) if self.conversation else None
        if turns is not None:
            while len(turns) > 3:
                turns = [turns[0], *turns[3:]]  # drop the oldest exchange after the first turn
                ids = self._whole_prompt_ids(conversation_json(turns))
                if len(ids) <= budget:
                    return ids
        else:
            turns = [{"role": "user", "content": observation}]
        for _ in range(8):  # shrink the latest text until the prompt fits
            text = conversation_json(turns) if self.conversation else turns[-1]["content"]
            ids = self._whole_prompt_ids(text)
            if len(ids) <= budget:
                return ids
            content = turns[-1]["content"]
            keep = max(1, int(len(content) * budget / len(ids) * 0.9))
            turns[-1] = {**turns[-1], "content": cut_middle(content, max(keep, 80))}
            if keep < 80:
                break
        raise ValueError(
            f"max_prompt_tokens={budget} cannot hold even the system prompt and a cut "
            f"observation ({len(ids)} tokens): raise it."
        )

    def _find_shared_prefix(self) -> list[int]:
        """Token ids every prompt starts with (system message, instruction, chat scaffolding).

        Found as the common prefix of two prompts with different observations; each batch still
        checks that its prompts really start with it (BPE may merge across the boundary), so a
        wrong guess only costs speed, never correctness.
        """
        first, second = self.prompt_ids("0 a"), self.prompt_ids("1 b")
        length = 0
        for a, b in zip(first, second, strict=False):
            if a != b:
                break
            length += 1
        return list(first[:length]) if length >= _MIN_SHARED_PREFIX else []

    def _split_prefix(self, prompts: Sequence[list[int]]) -> int:
        """Length of the shared prefix usable for this batch (0: encode prompts whole)."""
        prefix = self.shared_prefix
        if not prefix or (self.training and self.gradient_checkpointing):
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

    def weights_version(self) -> tuple[int, float]:
        """Changes whenever a trainable weight does, so the caches computed with the old weights
        (the prefix KV cache, the remembered choice scores) are dropped by their owner, never by
        a caller who might forget.

        Version counters alone miss writes that bypass them (Hugging Face's Trainer, as used by
        SFT, updates weights without bumping them: measured; ``p.data`` writes too), so a
        fingerprint of the trainable tensors' values is part of it: their norms, in one fused
        call and one sync (the sum of sums would miss updates that cancel out)."""
        # The optimizer's parameters: what trains (found without walking the model's modules).
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
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

    def _prefix_cache(self, n: int, reserve: int | None = None) -> Any:
        """A KV cache holding the shared prefix for ``n`` rows (with ``reserve`` free positions
        after it in a :class:`ReservedCache` if given, else a ``DynamicCache``).

        Without gradients (rollouts, evaluation) the prefix is encoded once per
        :meth:`weights_version` and reused across steps. With gradients it is encoded once per
        micro-batch, and the gradients of every row flow back through that one pass.
        """
        from transformers import DynamicCache

        if torch.is_grad_enabled() or self._reference_mode:
            layers = self._encode_prefix()
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
        ids = torch.tensor([self.shared_prefix], dtype=torch.long, device=self.device)
        out = self.lm(input_ids=ids, use_cache=True, logits_to_keep=1)
        return [(layer.keys, layer.values) for layer in out.past_key_values.layers]

    def invalidate_prefix_cache(self) -> None:
        """Forget what was computed with the current weights (the prefix KV cache, remembered
        choice scores). Never needed for correctness (both follow :meth:`weights_version`); it
        frees their memory."""
        self._prefix_kv = None

    def set_training_mode(self, mode: bool) -> None:
        if mode:
            self.invalidate_prefix_cache()  # the weights are about to change
        super().set_training_mode(mode)

    def _encode_prompts(
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
        prompts = [self.prompt_ids(str(o)) for o in observations]
        size = self._split_prefix(prompts)
        ids, mask = self._pad([p[size:] for p in prompts], left=True)
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
            cache = self._prefix_cache(len(prompts), room)
        elif reserve is not None:  # the prompt itself is the first write
            cache = ReservedCache(int(self.lm.config.get_text_config().num_hidden_layers), reserve)
        else:
            cache = None
        return ids, mask, positions, cache, width

    def _pad(
        self, seqs: Sequence[Sequence[int] | np.ndarray], *, left: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Token sequences as a padded ``(n, width)`` id matrix plus attention mask."""
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), int(self.tokenizer.pad_token_id), dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, seq in enumerate(seqs):
            cols = slice(width - len(seq), width) if left else slice(0, len(seq))
            ids[i, cols] = torch.as_tensor(np.asarray(seq, dtype=np.int64))
            mask[i, cols] = 1
        return ids.to(self.device), mask.to(self.device)

    def _collects_states(self) -> bool:
        """Whether model calls now keep states for the update: rollouts (no gradients) of a
        policy whose update starts from them, outside evaluation."""
        return self.uses_rollout_states and self._states_wanted and not torch.is_grad_enabled()

    def _capturing(self) -> contextlib.AbstractContextManager[list[torch.Tensor]]:
        """Collects the first trainable layer's inputs of the model calls inside (see
        :meth:`_collects_states`); elsewhere a no-op yielding an empty list."""
        if self.top is None or not self._collects_states():
            return contextlib.nullcontext([])
        return self.top.capture()

    def _without_states(self) -> contextlib.AbstractContextManager[None]:
        """Calls inside keep no states (evaluation: nothing will be trained on them)."""
        return self._keeping_states(False)

    @contextlib.contextmanager
    def _keeping_states(self, wanted: bool) -> Iterator[None]:
        """Calls inside keep states or not, as ``wanted`` (the trunk cache keeps them even in
        evaluation)."""
        before, self._states_wanted = self._states_wanted, wanted
        try:
            yield
        finally:
            self._states_wanted = before

    @property
    def uses_rollout_states(self) -> bool:
        """Whether rollouts keep states and the update starts at the first trainable layer."""
        return (
            self.top is not None and self.reuse_rollout_states and not self.gradient_checkpointing
        )

    def _values(self, final: torch.Tensor, head_input: torch.Tensor | None = None) -> torch.Tensor:
        """``(n,)`` critic values from the last prompt token: its final hidden state ``final``,
        or with ``centred_critic`` the action head's centred, scaled input ``head_input``."""
        head = self.action_head
        if self.centred_critic and head is not None:
            assert head_input is not None, "the centred critic reads the head's features"
            final = head.standardise(head_input)
        values: torch.Tensor = self.value_head(final.float()).squeeze(-1)
        return values

    def _head_layer(self, n_hidden_states: int) -> int:
        """The ``hidden_states`` index the action head reads: the first trainable layer's input
        (frozen, cached, 2-6x fewer steps to fit than the final layer), else the final one."""
        first = self.first_trainable_layer
        return first if first else n_hidden_states - 1

    def _prompt_pass(
        self, observations: Sequence[str], reserve: int | None = None
    ) -> tuple[
        torch.Tensor, torch.Tensor, Any, torch.Tensor, list[TurnStates] | None, torch.Tensor
    ]:
        """Run the prompts once: next-token logits, values, KV cache, the full mask, (when
        collected) each row's states for the update, and the action head's input (the last
        prompt token's hidden state at :meth:`_head_layer`)."""
        ids, mask, positions, cache, _ = self._encode_prompts(observations, reserve=reserve)
        with self._capturing() as captured:
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
        head_input = out.hidden_states[self._head_layer(len(out.hidden_states))][:, -1].float()
        values = self._values(last_hidden, head_input)
        states = None
        if captured:
            offset, width = mask.shape[1] - ids.shape[1], ids.shape[1]
            lengths = mask[:, offset:].sum(-1).tolist()
            states = [
                TurnStates(captured[0][i, width - length :], offset)
                for i, length in enumerate(lengths)
            ]
        return out.logits[:, -1], values, out.past_key_values, mask, states, head_input
