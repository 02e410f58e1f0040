"""The policy's third layer: re-evaluating stored actions with gradients, for the PPO update.

The same numbers as the rollout computed (invariant 1), either by running the whole model again or,
where the bottom layers are frozen, only the trainable layers on the states the rollout kept
(:mod:`gym_llm.policy.top_layers`); plus what the update changes and saves.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch.distributed.fsdp import FSDPModule

from gym_llm.policy.action_words import decisions
from gym_llm.policy.outputs import Evaluation, UpdateWork
from gym_llm.policy.sampling import categorical_evaluation, token_evaluation
from gym_llm.policy.state_actions import PerStateChoices
from gym_llm.policy.top_layers import TurnStates, num_layers, pad_states
from gym_llm.policy.trunk import distinct_rows


class UpdatePasses(PerStateChoices):
    """``evaluate_actions`` (whole model or from stored states), the reference model's
    log-probs, the update's memory estimate and the trainable weights."""

    uses_lora: bool
    #: Running count of what the update computed (benchmarks read and reset it).
    update_work: UpdateWork

    def evaluate_actions(
        self,
        observations: Sequence[str],
        actions: Sequence[np.ndarray],
        states: Sequence[TurnStates | None] | None = None,
    ) -> Evaluation:
        """Log-probs (per action token), entropy and values of stored actions, with gradients.

        ``states`` (from the rollout's :attr:`PolicyStep.states`) let the pass start at the first
        trainable layer (:mod:`gym_llm.policy.top_layers`); without them the whole model runs. Both give
        the same numbers to float rounding.
        """
        if self._splits():  # per-state action lists: one pass per list (state_actions.py)
            return self._evaluate_in_groups(observations, actions, states, self.evaluate_actions)
        from_states = (
            self.uses_rollout_states and states is not None and all(s is not None for s in states)
        )
        if torch.is_grad_enabled():
            self._count_work(observations, actions, from_states)
        if from_states:
            return self._evaluate_from_states(observations, actions, list(states))  # type: ignore[arg-type]
        if self.action_mode == "choice":
            logits, values, _ = self._choice_scores(observations)
            return self._choice_evaluation(logits, values, actions)
        reply, reply_mask = self._pad(actions, left=False)
        width = reply.shape[1]
        ids, mask, positions, cache, prompt_width = self._encode_prompts(
            observations, extra=(reply, reply_mask)
        )
        out = self.lm(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=cache is not None,
            output_hidden_states=True,
            logits_to_keep=width + 1,
        )
        layer = self._head_layer(len(out.hidden_states))
        head_input = out.hidden_states[layer][:, prompt_width - 1].float()
        values = self._values(out.hidden_states[-1][:, prompt_width - 1].float(), head_input)
        scores = self._word_scores(head_input)
        return self._generation_evaluation(out.logits[:, :-1].float(), values, actions, scores)

    def _count_work(
        self, observations: Sequence[str], actions: Sequence[np.ndarray], from_states: bool
    ) -> None:
        keys = [str(o) for o in observations]
        prompts = [self.prompt_ids(k) for k in keys]
        size = self._split_prefix(prompts)
        total = num_layers(self.lm)
        layers = total - self.first_trainable_layer if from_states else total
        if self.action_mode == "choice":
            assert self._candidates is not None
            rows = list(dict.fromkeys(keys)) if from_states else keys
            lengths = {k: len(p) for k, p in zip(keys, prompts, strict=True)}
            k, width = self._candidates[0].shape
            follow = k * (width - 1)
            tokens = sum(lengths[key] - size + follow for key in rows)
            head = len(rows) * (1 + follow)
        else:  # from states, a repeated prompt is computed once
            lengths = {k: len(p) for k, p in zip(keys, prompts, strict=True)}
            rows = list(lengths) if from_states else keys
            tokens = sum(lengths[key] - size for key in rows) + sum(len(a) for a in actions)
            head = sum(len(a) for a in actions)
        tokens += size  # the shared prefix, once per pass
        self.update_work.token_layers += tokens * layers
        self.update_work.head_rows += head
        self.update_work.tokens += tokens

    def _choice_evaluation(
        self, logits: torch.Tensor, values: torch.Tensor, actions: Sequence[np.ndarray]
    ) -> Evaluation:
        index = torch.tensor([int(a[0]) for a in actions], device=self.device)
        lp, entropy, everything = categorical_evaluation(logits, index)
        return Evaluation(lp, torch.ones_like(lp, dtype=torch.bool), entropy, values, everything)

    def _evaluate_from_states(
        self,
        observations: Sequence[str],
        actions: Sequence[np.ndarray],
        states: list[TurnStates],
    ) -> Evaluation:
        """:meth:`evaluate_actions` running only the trainable layers on the stored states.

        Turns that share an observation share one row of the pass (choice mode: its scores and
        value; generate mode: its prompt, whose keys and values every reply then attends to), so
        autograd sums their gradients exactly as separate rows would.
        """
        keys = [str(o) for o in observations]
        size = self._split_prefix([self.prompt_ids(k) for k in keys])
        rows, firsts = distinct_rows(keys)
        index = torch.tensor(rows, device=self.device)
        distinct = [states[i] for i in firsts]
        if self.action_mode == "choice":
            logits, values = self._top_choice(distinct, size)
            return self._choice_evaluation(logits[index], values[index], actions)
        if len(distinct) == len(keys):
            return self._replies_from_states(states, actions, size)
        return self._shared_prompt_replies(distinct, states, index, actions, size)

    def _replies_from_states(
        self, states: Sequence[TurnStates], actions: Sequence[np.ndarray], size: int
    ) -> Evaluation:
        """Generate mode, one row per turn: its prompt and its reply's fed-back tokens."""
        top = self.top
        assert top is not None
        empty = states[0].prompt.new_zeros((0, states[0].prompt.shape[-1]))
        extras = [t.action if t.action is not None else empty for t in states]
        hidden, mask, width = pad_states([self._suffix_states(t, size) for t in states], extras)
        n = hidden.shape[0]
        if size:
            mask = torch.cat([torch.ones((n, size), dtype=mask.dtype, device=mask.device), mask], 1)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, size:]
        cache = self._top_prefix_cache(n) if size else None
        final = top(hidden, mask, positions, cache)
        head_input = hidden[:, width - 1].float()  # the first trainable layer's input
        values = self._values(final[:, width - 1].float(), head_input)
        logits = top.logits(final[:, width - 1 :]).float()
        return self._generation_evaluation(logits, values, actions, self._word_scores(head_input))

    def _shared_prompt_replies(
        self,
        prompts: Sequence[TurnStates],
        turns: Sequence[TurnStates],
        index: torch.Tensor,
        actions: Sequence[np.ndarray],
        size: int,
    ) -> Evaluation:
        """Generate mode with repeated prompts: each distinct prompt once (its keys and values
        kept), then every turn's reply tokens on its prompt's row of that cache."""
        top = self.top
        assert top is not None
        hidden, mask, width = pad_states([self._suffix_states(t, size) for t in prompts])
        d = hidden.shape[0]
        if size:
            mask = torch.cat([torch.ones((d, size), dtype=mask.dtype, device=mask.device), mask], 1)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, size:]
        cache = self._top_prefix_cache(d) if size else top.new_cache()
        final = top(hidden, mask, positions, cache)
        last = final[:, width - 1]
        head_input = hidden[:, width - 1].float()  # the first trainable layer's input
        values = self._values(last.float(), head_input)[index]
        words = self._word_scores(head_input[index])
        first_logits = top.logits(last)[index].unsqueeze(1)  # (n, 1, V): each reply's 1st token
        n = len(actions)
        cache.batch_select_indices(index)  # every turn's row of its prompt's keys and values
        reply_states = [t.action for t in turns]
        longest = max((r.shape[0] for r in reply_states if r is not None), default=0)
        if not longest:  # one-token replies: nothing was fed back
            return self._generation_evaluation(first_logits.float(), values, actions, words)
        fed = last.new_zeros((n, longest, last.shape[-1]))
        fed_mask = torch.zeros((n, longest), dtype=mask.dtype, device=mask.device)
        for i, r in enumerate(reply_states):
            if r is not None:
                fed[i, : r.shape[0]] = r
                fed_mask[i, : r.shape[0]] = 1
        full_mask = torch.cat([mask[index], fed_mask], 1)
        fed_positions = mask[index].sum(-1, keepdim=True) + torch.arange(longest, device=fed.device)
        out = top(fed, full_mask, fed_positions, cache)
        logits = torch.cat([first_logits, top.logits(out)], 1).float()
        return self._generation_evaluation(logits, values, actions, words)

    def _generation_evaluation(
        self,
        logits: torch.Tensor,
        values: torch.Tensor,
        actions: Sequence[np.ndarray],
        scores: torch.Tensor | None,
    ) -> Evaluation:
        """Per-token log-probs and mean entropy of replies from the LM's logits at the last
        prompt position and at every fed reply token (``(n, >= T, V)``; extra columns are
        ignored) plus the action head's ``scores`` at the action words; with the head, also
        each reply's decision among the actions, and the same with gradients to the head only."""
        reply, reply_mask = self._pad(actions, left=False)
        with_words = self._with_words(logits, scores)
        lp, valid, entropy = token_evaluation(with_words, reply, reply_mask, self.temperature)
        if self.action_words is None or scores is None:
            return Evaluation(lp, valid, entropy, values)
        decision, by_head, found = decisions(
            logits,
            reply,
            valid,
            self.action_words,
            len(self.actions_list),
            self.temperature,
            scores,
        )
        return Evaluation(lp, valid, entropy, values, None, decision, found, by_head)

    def update_bytes_per_turn(
        self, observations: Sequence[str], actions: Sequence[np.ndarray]
    ) -> int:
        """A generous estimate of the memory one turn of the largest kind in this batch holds
        during the update's forward and backward pass (activations kept for the backward, the
        attention weights, and the logits at the scored positions), for choosing micro-batches.

        Per layer run and token, a Llama-style block keeps about ``10 d + 5 ffn`` values for
        its backward (norm inputs, q/k/v, attention output, MLP gate/up/activation), plus
        ``heads x context`` attention weights; per layer and turn, the keys and values over the
        whole context, once as cached and once repeated to every query head. Only the trainable layers count when the update
        starts from the rollout's states (:attr:`uses_rollout_states`).
        """
        config = self.lm.config.get_text_config()
        total = num_layers(self.lm)
        layers = total - self.first_trainable_layer if self.uses_rollout_states else total
        prompts = [len(self.prompt_ids(str(o))) for o in observations]
        prefix = len(self.shared_prefix)
        new_tokens = max(prompts) - prefix + max(len(a) for a in actions)
        if self.action_mode == "choice" and self._candidates is not None:
            k, width = self._candidates[0].shape
            new_tokens += k * (width - 1)
            scored = k * width
        else:
            scored = max(len(a) for a in actions)
        d = int(config.hidden_size)
        ffn = int(getattr(config, "intermediate_size", 4 * d))
        heads = int(config.num_attention_heads)
        kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
        head_dim = int(getattr(config, "head_dim", None) or d // heads)
        context = max(prompts) + max(len(a) for a in actions)
        per_token_layer = 10 * d + 5 * ffn + heads * context
        # Keys and values over the whole context (the shared prefix's too) in every layer run:
        # the cache's, and their copies repeated to every query head (measured on SmolLM2: a
        # third of a Blackjack turn's update memory).
        per_layer = 2 * (heads + kv_heads) * head_dim * context
        element = torch.finfo(self.lm.dtype).bits // 8
        logits = scored * int(config.vocab_size) * 4 * 3  # fp32 logits, log-softmax, gradient
        return int((new_tokens * per_token_layer + per_layer) * layers * element + logits)

    def trainable_state_dict(self) -> dict[str, torch.Tensor]:
        """Only what training changes (LoRA + value head, or everything without LoRA), plus the
        action head's centre and scale (set from the first rollout)."""
        state = {
            name: p.detach().cpu().clone() for name, p in self.named_parameters() if p.requires_grad
        }
        state.update(self._head_buffers())
        return state

    def _head_buffers(self) -> dict[str, torch.Tensor]:
        return {
            name: b.detach().cpu().clone()
            for name, b in self.named_buffers()
            if name.startswith(("action_head.", "value_head."))
        }

    def load_trainable_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        if isinstance(self.lm, FSDPModule):  # the gathered copy would be dropped at the update
            raise ValueError(
                "This policy's weights are sharded (FSDP, since its first learn()); load saved "
                "weights into a freshly built agent (PPO.load) before learning."
            )
        params: dict[str, torch.Tensor] = dict(self.named_parameters())
        params.update(
            (n, b) for n, b in self.named_buffers() if n.startswith(("action_head.", "value_head."))
        )
        missing = [name for name, p in params.items() if p.requires_grad and name not in state]
        missing += [name for name in self._head_buffers() if name not in state]
        unknown = [name for name in state if name not in params]
        if missing or unknown:
            raise ValueError(
                f"Saved weights do not match this policy (missing {missing[:3]}, unknown "
                f"{unknown[:3]}): was it saved with another model or LoRA config?"
            )
        with torch.no_grad():
            for name, tensor in state.items():
                params[name].copy_(tensor.to(params[name].device, params[name].dtype))
        self.invalidate_prefix_cache()

    def reference_log_probs(
        self,
        observations: Sequence[str],
        actions: Sequence[np.ndarray],
        states: Sequence[TurnStates | None] | None = None,
    ) -> torch.Tensor:
        """Log-probs under the reference model: the same weights with the LoRA adapter off."""
        if not self.uses_lora:
            raise ValueError(
                "A KL penalty to the reference model needs LoRA (lora=None trains all weights)."
            )
        self._reference_mode = True  # the cached prefix KV was computed with the adapter on
        try:
            with torch.no_grad(), self.lm.disable_adapter():
                return self.evaluate_actions(observations, actions, states).token_log_probs
        finally:
            self._reference_mode = False
