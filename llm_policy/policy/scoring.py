"""The policy's third layer: prompt passes -> action distributions, for rollouts.

Choice mode scores every listed action as a continuation of the prompt (from the cached frozen
trunk where the bottom layers are frozen, :mod:`gym_llm.policy.trunk`; else one prompt pass, its
KV cache shared by the candidates) and remembers each distinct observation's scores per weights
version; generate mode samples replies token by token with the log-probs as sampled (with the
action head, its scores added at the action words' tokens: :mod:`gym_llm.policy.action_words`).
Rollout passes run through the packed frozen weights where packing is on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch

from gym_llm.policy.action_words import ActionWords
from gym_llm.policy.packed_linear import PackedLinears
from gym_llm.policy.sampling import sample
from gym_llm.policy.top_layers import TurnStates
from gym_llm.policy.trunk import TrunkPasses, distinct_rows
from gym_llm.replies import Reply

ActionMode = Literal["choice", "generate"]
Normalization = Literal["sum", "mean"]

#: Distinct observations whose choice scores a rollout remembers (see _remembered_choice_scores),
#: and the most memory their stored states may take (the rollout buffer shares those tensors).
_MEMO_LIMIT = 4096
_MEMO_MAX_BYTES = 512 * 2**20

#: The observation whose action scores calibration subtracts ("Calibrate Before Use").
CONTENT_FREE_OBSERVATION = "N/A"


class ActionScoring(TrunkPasses):
    """Choice scores (cached, memoised, or whole-sequence as the reference) and generation."""

    max_new_tokens: int
    reserve_kv_cache: bool
    stop_ids: list[int]
    memoize_choice_scores: bool
    uses_lora: bool
    #: Generate mode with the action head: the tokens its scores are added to (else ``None``).
    action_words: ActionWords | None
    #: Choice mode: observation -> (action logits, value, states) under the current weights.
    _memo: dict[str, tuple[torch.Tensor, torch.Tensor, TurnStates | None]]
    _memo_version: tuple[tuple[int, float], int, float, str, float | None] | None
    _memo_bytes: int

    def invalidate_prefix_cache(self) -> None:
        """Forget what was computed with the current weights (the prefix KV cache, remembered
        choice scores). Never needed for correctness (both follow :meth:`weights_version`); it
        frees their memory."""
        super().invalidate_prefix_cache()
        self._forget_scores()

    def _choice_scores(
        self, observations: Sequence[str]
    ) -> tuple[torch.Tensor, torch.Tensor, list[TurnStates] | None]:
        """``(n, K)`` action logits (candidate scores / temperature), ``(n,)`` values and (when
        collected) each row's states for the update."""
        assert self._candidates is not None
        if self.training and self.gradient_checkpointing:
            return (*self._choice_scores_uncached(observations), None)
        if self.uses_trunk_cache and not torch.is_grad_enabled():
            return self._choice_scores_from_trunk(observations)
        return self._whole_choice_scores(observations)

    def _whole_choice_scores(
        self, observations: Sequence[str]
    ) -> tuple[torch.Tensor, torch.Tensor, list[TurnStates] | None]:
        """Choice scores from whole-model passes (prompt, then the candidates on its cache)."""
        token_lp, values, states, features = self._whole_choice_parts(observations)
        return self._scores(token_lp, features), values, states

    def prior_choice_scores(self, observations: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(n, K)`` log-probs of the listed actions as the policy starts (the LM with its
        adapter off, the calibration as set, no action head) and ``(n, d)`` features: the last
        prompt token's hidden state where the action head reads it, the first trainable layer's
        input. Neither depends on anything training changes, so a caller may keep them per
        observation for a whole run: off-policy value learning (``gym_llm.DQN``) acts on the
        first and regresses action values from the second."""
        if self._candidates is None:
            raise ValueError(
                "prior_choice_scores needs choice mode (action_mode='choice'): the env must list "
                "its actions."
            )
        if not self.uses_lora:
            raise ValueError(
                "prior_choice_scores needs LoRA: the prior is the model with its adapter off, "
                "and lora=None trains the base weights themselves."
            )
        self._reference_mode = True  # the cached prefix KV was computed with the adapter on
        try:
            with torch.no_grad(), self._without_states(), self.lm.disable_adapter():
                token_lp, _, _, features = self._whole_choice_parts(list(observations))
                logits = self._scores(token_lp, features, head=False)
        finally:
            self._reference_mode = False
        return torch.log_softmax(logits.float(), dim=-1), features

    def _whole_choice_parts(
        self, observations: Sequence[str]
    ) -> tuple[torch.Tensor, torch.Tensor, list[TurnStates] | None, torch.Tensor]:
        """``(n, K, width)`` candidate token log-probs, values, states and head features."""
        assert self._candidates is not None
        cand_ids = self._candidates[0]
        logits, values, cache, mask, states, features = self._prompt_pass(observations)
        n, k, width = mask.shape[0], cand_ids.shape[0], cand_ids.shape[1]
        first = torch.log_softmax(logits.float(), dim=-1)  # (n, V) next-token dist
        # First candidate token: from the shared prompt pass.
        token_lp = first[:, cand_ids[:, 0]].unsqueeze(-1)  # (n, K, 1)
        if width > 1:
            cache.batch_repeat_interleave(k)
            full_mask, positions = self._follow_layout(mask)
            with self._capturing() as captured:
                out = self.lm(
                    input_ids=cand_ids[:, :-1].repeat(n, 1),  # all but each candidate's last
                    attention_mask=full_mask,
                    position_ids=positions,
                    past_key_values=cache,
                    use_cache=True,
                )
            token_lp = torch.cat([token_lp, self._follow_log_probs(out.logits, n)], dim=-1)
            if states is not None and captured:
                follow = captured[0].view(n, k, width - 1, -1)
                for i, turn in enumerate(states):
                    turn.action = follow[i]
        return token_lp, values, states, features

    def _choice_scores_from_trunk(
        self, observations: Sequence[str]
    ) -> tuple[torch.Tensor, torch.Tensor, list[TurnStates]]:
        """:meth:`_choice_scores` with the trunk cache: observations whose frozen-layer states
        are cached run only the trainable layers; the others run the whole model once (the
        cost they had without the cache), which keeps their states for next time. One row per
        distinct observation; the states go to the update as they are."""
        keys = [str(o) for o in observations]
        rows, firsts = distinct_rows(keys)
        distinct = [keys[i] for i in firsts]
        prompts = [tuple(self.prompt_ids(k)) for k in distinct]
        cache = self._trunk()  # the frozen weights checked once per call
        found = [self.cached_trunk(p, cache) for p in prompts]
        misses = [i for i, hit in enumerate(found) if hit is None]
        hits = [i for i, hit in enumerate(found) if hit is not None]
        assert self._candidates is not None
        logits = torch.empty((len(distinct), self._candidates[0].shape[0]), device=self.device)
        values = torch.empty(len(distinct), device=self.device)
        if misses:
            with self._keeping_states(True):
                miss_logits, miss_values, computed = self._whole_choice_scores(
                    [distinct[i] for i in misses]
                )
            assert computed is not None
            for i, turn in zip(misses, computed, strict=True):
                found[i] = self.keep_trunk(prompts[i], turn, cache)
            logits[misses], values[misses] = miss_logits, miss_values
        if hits:
            states = [found[i] for i in hits]
            size = self._split_prefix([list(prompts[i]) for i in hits])
            logits[hits], values[hits] = self._top_choice(states, size)  # type: ignore[arg-type]
        index = torch.tensor(rows, device=self.device)
        return logits[index], values[index], [found[r] for r in rows]  # type: ignore[misc]

    def _choice_scores_uncached(
        self, observations: Sequence[str]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Choice scores from whole (prompt + candidate) sequences, without any KV cache.

        K times the compute of the cached path; used where caches are unavailable (training with
        gradient checkpointing) and as the reference the cached path is tested against.
        """
        assert self._candidates is not None
        cand_ids, cand_mask = self._candidates
        ids, mask = self._pad([self.prompt_ids(str(o)) for o in observations], left=True)
        n, k, width = ids.shape[0], cand_ids.shape[0], cand_ids.shape[1]
        full_ids = torch.cat([ids.repeat_interleave(k, 0), cand_ids.repeat(n, 1)], -1)
        full_mask = torch.cat([mask.repeat_interleave(k, 0), cand_mask.repeat(n, 1)], -1)
        out = self.lm(
            input_ids=full_ids,
            attention_mask=full_mask,
            position_ids=(full_mask.cumsum(-1) - 1).clamp(min=0),
            output_hidden_states=True,
            logits_to_keep=width + 1,
        )
        log_dist = torch.log_softmax(out.logits[:, :-1].float(), dim=-1)
        token_lp = log_dist.gather(-1, cand_ids.repeat(n, 1).unsqueeze(-1)).squeeze(-1)
        last_prompt = out.hidden_states[-1][::k, ids.shape[1] - 1].float()
        layer = self._head_layer(len(out.hidden_states))
        head_input = out.hidden_states[layer][::k, ids.shape[1] - 1].float()
        values = self._values(last_prompt, head_input)
        return self._scores(token_lp.view(n, k, width), head_input), values

    def _scores_version(self) -> tuple[tuple[int, float], int, float, str, float | None]:
        """Changes whenever the choice scores could: a trainable weight (:meth:`weights_version`),
        the temperature, the normalisation or the calibration constants."""
        calibration = self.choice_calibration
        return (
            self.weights_version(),
            self._trunk_weights_version() if self.uses_trunk_cache else 0,
            self.temperature,
            self.choice_normalization,
            None if calibration is None else float(calibration.double().sum()),
        )

    def _remembered_choice_scores(
        self, observations: Sequence[str]
    ) -> tuple[torch.Tensor, torch.Tensor, list[TurnStates] | None]:
        """:meth:`_choice_scores` with each distinct observation scored once per weights version.

        Envs revisit observations all the time (Blackjack has 280 states, KeywordBandit 4 per
        option set), and under the same weights a prompt's scores and value are the same numbers,
        so a rollout scores each distinct observation once and samples every turn afresh from
        them. The memory is forgotten whenever :meth:`_scores_version` changes (any trainable
        weight, the temperature, the normalisation, the calibration).
        """
        if not self.memoize_choice_scores or torch.is_grad_enabled() or self._reference_mode:
            return self._choice_scores(observations)
        version = self._scores_version()
        keys = [str(o) for o in observations]
        need_states = self._collects_states()
        todo = list(
            dict.fromkeys(
                k for k in keys if k not in self._memo or (need_states and self._memo[k][2] is None)
            )
        )
        if version != self._memo_version or len(self._memo) + len(todo) > _MEMO_LIMIT:
            self._forget_scores()
            self._memo_version = version
            todo = list(dict.fromkeys(keys))
        if todo:
            logits, values, states = self._choice_scores(todo)
            added = sum(t.nbytes for t in states) if states else 0
            if self._memo_bytes + added > _MEMO_MAX_BYTES:
                self._forget_scores()  # keep this batch's entries only
                self._memo_version = version
            for i, key in enumerate(todo):
                self._memo[key] = (logits[i], values[i], states[i] if states else None)
            self._memo_bytes += added
        rows = [self._memo[k] for k in keys]
        remembered = [r[2] for r in rows]
        turn_states = [s for s in remembered if s is not None]
        return (
            torch.stack([r[0] for r in rows]),
            torch.stack([r[1] for r in rows]),
            turn_states if len(turn_states) == len(rows) else None,
        )

    def _forget_scores(self) -> None:
        self._memo.clear()
        self._memo_bytes = 0

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

    def calibrate_action_head(self, observations: Sequence[str]) -> bool:
        """Set the action head's centre and scale from these observations, once, before its first
        step (its weights are zero: no logit moves). Whether it calibrated now."""
        head = self.action_head
        if head is None or head.is_calibrated:
            return False
        if self.centred_critic and bool(self.value_head.weight.detach().any()):
            raise RuntimeError(  # centring its input now would change its values
                "The critic has trained already: calibrate before the first update (PPO does)."
            )
        distinct = list(dict.fromkeys(str(o) for o in observations))
        with torch.no_grad(), self.rollout_kernels(), self._without_states():
            features = torch.cat(
                [self._prompt_pass(distinct[i : i + 32])[5] for i in range(0, len(distinct), 32)]
            )
        head.calibrate(features)
        return True

    def content_free_scores(self) -> torch.Tensor:
        """Each action's score (sum or mean of its token log-probs) after the content-free
        observation ``"N/A"`` ("Calibrate Before Use", Zhao et al. 2021): the model's prior
        over the action strings, which calibration divides out of the policy."""
        calibration, self.choice_calibration = self.choice_calibration, None
        try:
            with torch.no_grad(), self._without_states():
                logits, _, _ = self._choice_scores([CONTENT_FREE_OBSERVATION])
        finally:
            self.choice_calibration = calibration
        self.invalidate_prefix_cache()
        return (logits[0] * self.temperature).detach()

    def _generate(
        self, observations: Sequence[str], deterministic: bool
    ) -> tuple[list[np.ndarray], list[np.ndarray], torch.Tensor, list[TurnStates] | None]:
        """Sample replies for all envs at once; a row leaves the decode batch at its stop token,
        so short replies do not pay for the longest one."""
        reserve = self.max_new_tokens if self.reserve_kv_cache else None
        logits, values, cache, mask, states, head_input = self._prompt_pass(observations, reserve)
        words = self._word_scores(head_input)
        n = mask.shape[0]
        next_logits = logits
        stop = torch.tensor(self.stop_ids, device=self.device)
        rows = list(range(n))  # which original row each batch row is
        tokens: list[list[int]] = [[] for _ in range(n)]
        log_probs: list[list[float]] = [[] for _ in range(n)]
        fed: list[list[torch.Tensor]] = [[] for _ in range(n)]  # states of tokens fed back
        position = mask.sum(-1)
        for step in range(self.max_new_tokens):
            next_logits = self._with_words(next_logits.float(), words)
            dist = torch.log_softmax(next_logits / self.temperature, dim=-1)
            token = dist.argmax(-1) if deterministic else sample(dist)
            chosen_lp = dist.gather(-1, token.unsqueeze(-1)).squeeze(-1)
            for row, tok, lp in zip(rows, token.tolist(), chosen_lp.tolist(), strict=True):
                tokens[row].append(tok)
                log_probs[row].append(lp)
            going = ~torch.isin(token, stop)
            if not bool(going.any()) or step == self.max_new_tokens - 1:
                break  # the last sampled tokens are never fed back: no logits are needed after them
            if not bool(going.all()):
                keep = going.nonzero().squeeze(-1)
                cache.batch_select_indices(keep)
                rows = [rows[i] for i in keep.tolist()]
                token, mask, position = token[keep], mask[keep], position[keep]
                words = None if words is None else words[keep]
            ones = torch.ones((len(rows), 1), dtype=mask.dtype, device=self.device)
            mask = torch.cat([mask, ones], -1)
            with self._capturing() as captured:
                out = self.lm(
                    input_ids=token.unsqueeze(-1),
                    attention_mask=mask,
                    position_ids=position.unsqueeze(-1),
                    past_key_values=cache,
                    use_cache=True,
                )
            for row, hidden in zip(rows, captured[0] if captured else (), strict=False):
                fed[row].append(hidden)
            cache, next_logits, position = out.past_key_values, out.logits[:, -1], position + 1
        actions = [np.asarray(t, dtype=np.int64) for t in tokens]
        token_lps = [np.asarray(lp, dtype=np.float32) for lp in log_probs]
        if states is not None:
            for turn, hidden in zip(states, fed, strict=True):
                turn.action = torch.cat(hidden) if hidden else None
        return actions, token_lps, values, states

    def _word_scores(self, head_input: torch.Tensor) -> torch.Tensor | None:
        """Generate mode: the action head's ``(n, K)`` scores from its input (``None`` without
        it), added at each action's word tokens by :meth:`_with_words`."""
        if self.action_words is None or self.action_head is None:
            return None
        scores: torch.Tensor = self.action_head(head_input)
        return scores

    def _with_words(self, logits: torch.Tensor, scores: torch.Tensor | None) -> torch.Tensor:
        """Next-token logits ``(n, V)`` or ``(n, T, V)`` with the head's scores at the action
        words' tokens (:mod:`gym_llm.policy.action_words`); unchanged without the head."""
        if scores is None or self.action_words is None:
            return logits
        return self.action_words.add(logits, scores)

    def decode(self, token_ids: np.ndarray) -> str:
        """Reply text from sampled ids (stop tokens dropped)."""
        ids = [int(t) for t in token_ids if int(t) not in self.stop_ids]
        return str(self.tokenizer.decode(ids, skip_special_tokens=True)).strip()

    def reply(self, token_ids: np.ndarray) -> Reply:
        """The reply sent to the env: its text, carrying the ids as sampled up to the closing
        stop token (a conversation prompt puts them back exactly, see :mod:`gym_llm.replies`)."""
        ids = [int(t) for t in token_ids]
        if ids and ids[-1] in self.stop_ids:
            ids.pop()
        return Reply(self.decode(token_ids), ids)
