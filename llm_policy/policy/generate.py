"""Generate mode: the model writes its reply token by token, and PPO steps every sampled token.

Tokens are sampled from ``softmax(logits / temperature)`` (no top-k/top-p, whose truncation the
stored log-probs would not account for) and kept as sampled, never decoded and re-tokenised; a
row leaves the decode batch at its stop token. With the action head (an env that lists its
actions), the head's scores are added to the logits of each action's word tokens at every reply
position (:mod:`gym_llm.policy.action_words`), and each reply's decision among the actions is
evaluated too.

:meth:`GeneratedActions.sample` is the rollout, :meth:`GeneratedActions.evaluate` the update's
re-evaluation with gradients (the whole model again, or only the trainable layers on the states
the rollout kept): both reach the same numbers (invariant 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from gym_llm.policy.action_head import ActionHead
from gym_llm.policy.action_words import ActionWords, decisions
from gym_llm.policy.arguments import Sampling
from gym_llm.policy.constraints import (
    ReplyAutomaton,
    ReplyConstraint,
    allowed_mask,
    masked,
    node_bias,
    reply_bias,
    reply_masks,
    valid_mass,
)
from gym_llm.policy.lm import LMRunner
from gym_llm.policy.outputs import Evaluation, PolicyStep
from gym_llm.policy.sampling import sample, token_evaluation
from gym_llm.policy.top_layers import TurnStates, pad_states
from gym_llm.policy.trunk import distinct_rows
from gym_llm.replies import Reply


def decode(tokenizer: Any, stop_ids: Sequence[int], token_ids: np.ndarray) -> str:
    """Reply text from sampled ids (stop tokens dropped)."""
    ids = [int(t) for t in token_ids if int(t) not in stop_ids]
    return str(tokenizer.decode(ids, skip_special_tokens=True)).strip()


class GeneratedActions:
    """Samples and re-evaluates replies written token by token (a part of
    :class:`gym_llm.LLMPolicy`, the strategy of ``action_mode="generate"``)."""

    def __init__(
        self,
        runner: LMRunner,
        actions: tuple[str, ...],
        *,
        sampling: Sampling,
        stop_ids: list[int],
        action_head: ActionHead | None,
        action_words: ActionWords | None,
        constraint: ReplyConstraint | None = None,
    ) -> None:
        self.runner = runner
        #: The env's listed actions, if any (the action head's decision is among them).
        self.actions = actions
        #: Temperature, reply budget and KV-cache reservation, as the policy has them now.
        self.sampling = sampling
        self.stop_ids = stop_ids
        self.action_head = action_head
        #: With the action head: the tokens its scores are added to (else ``None``).
        self.action_words = action_words
        #: ``reply_constraint="action"``: the tries each reply is decoded under (else ``None``).
        self.constraint = constraint

    # --- the rollout ---------------------------------------------------------------------------

    def sample(self, observations: Sequence[str], deterministic: bool) -> PolicyStep:
        """A reply per observation, its tokens' exact log-probs, the value and (when kept) the
        states for the update."""
        actions, token_lps, values, states, mass = self._generate(observations, deterministic)
        return PolicyStep(
            replies=[self.reply(a) for a in actions],
            actions=actions,
            token_log_probs=token_lps,
            values=values,
            states=states,
            valid_mass=mass,
        )

    def _generate(
        self, observations: Sequence[str], deterministic: bool
    ) -> tuple[
        list[np.ndarray], list[np.ndarray], torch.Tensor, list[TurnStates] | None, np.ndarray | None
    ]:
        """Sample replies for all envs at once; a row leaves the decode batch at its stop token
        (or, constrained, once it spells a whole action), so short replies do not pay for the
        longest one. Also the valid mass at the first token, constrained."""
        runner = self.runner
        reserve = self.sampling.max_new_tokens if self.sampling.reserve_kv_cache else None
        logits, values, cache, mask, states, head_input = runner.prompt_pass(observations, reserve)
        words = self.word_scores(head_input)
        n = mask.shape[0]
        next_logits = logits
        stop = torch.tensor(self.stop_ids, device=runner.device)
        rows = list(range(n))  # which original row each batch row is
        tokens: list[list[int]] = [[] for _ in range(n)]
        log_probs: list[list[float]] = [[] for _ in range(n)]
        fed: list[list[torch.Tensor]] = [[] for _ in range(n)]  # states of tokens fed back
        position = mask.sum(-1)
        tries = self.constraint.tries(observations) if self.constraint is not None else None
        mass = None
        for step in range(self.sampling.max_new_tokens):
            next_logits = self.with_words(next_logits.float(), words)
            if tries is not None:
                active = [tries[r] for r in rows]
                vocab = next_logits.shape[-1]
                allowed = allowed_mask(active, [tokens[r] for r in rows], vocab, runner.device)
                if step == 0:
                    free = torch.log_softmax(next_logits / self.sampling.temperature, dim=-1)
                    mass = valid_mass(free, allowed).detach().cpu().numpy()
                next_logits = masked(next_logits, allowed)
                bias = node_bias(active, [tokens[r] for r in rows], vocab, runner.device)
                if bias is not None:
                    next_logits = next_logits + bias
            dist = torch.log_softmax(next_logits / self.sampling.temperature, dim=-1)
            token = dist.argmax(-1) if deterministic else sample(dist)
            chosen_lp = dist.gather(-1, token.unsqueeze(-1)).squeeze(-1)
            for row, tok, lp in zip(rows, token.tolist(), chosen_lp.tolist(), strict=True):
                tokens[row].append(tok)
                log_probs[row].append(lp)
            going = ~torch.isin(token, stop)
            if tries is not None:  # a whole action that nothing continues: the reply is done
                done = [tries[r].finished(tokens[r]) for r in rows]
                going &= ~torch.tensor(done, device=going.device)
            if not bool(going.any()) or step == self.sampling.max_new_tokens - 1:
                break  # the last sampled tokens are never fed back: no logits are needed after them
            if not bool(going.all()):
                keep = going.nonzero().squeeze(-1)
                cache.batch_select_indices(keep)
                rows = [rows[i] for i in keep.tolist()]
                token, mask, position = token[keep], mask[keep], position[keep]
                words = None if words is None else words[keep]
            ones = torch.ones((len(rows), 1), dtype=mask.dtype, device=runner.device)
            mask = torch.cat([mask, ones], -1)
            with runner.capturing() as captured:
                out = runner.lm(
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
        return actions, token_lps, values, states, mass

    def calibrate(self, observation: str) -> None:
        """Constrained replies over a fixed list: set each trie choice's constant from its
        masked log-prob after ``observation`` (the content-free one), so that there every
        choice is even."""
        assert self.constraint is not None and self.actions, "calibration needs a fixed list"
        trie = self.constraint.trie(self.actions)
        trie.bias = {}
        replies = trie.replies()
        # Log-probs at temperature 1: the constants are logits, divided by the temperature
        # with the rest (as choice mode's scores), so the content-free odds are even at any.
        temperature, self.sampling.temperature = self.sampling.temperature, 1.0
        try:
            with torch.no_grad():
                out = self.evaluate(
                    [observation] * len(replies), [np.asarray(r) for r in replies], None
                )
        finally:
            self.sampling.temperature = temperature
        lps = [out.token_log_probs[i, : len(r)].tolist() for i, r in enumerate(replies)]
        trie.set_bias(replies, lps)

    @property
    def calibrated(self) -> bool:
        """Whether the constrained replies are calibrated."""
        return self.constraint is not None and self.constraint.calibrated

    def word_scores(self, head_input: torch.Tensor) -> torch.Tensor | None:
        """The action head's ``(n, K)`` scores from its input (``None`` without it), added at
        each action's word tokens by :meth:`with_words`."""
        if self.action_words is None or self.action_head is None:
            return None
        scores: torch.Tensor = self.action_head(head_input)
        return scores

    def with_words(self, logits: torch.Tensor, scores: torch.Tensor | None) -> torch.Tensor:
        """Next-token logits ``(n, V)`` or ``(n, T, V)`` with the head's scores at the action
        words' tokens (:mod:`gym_llm.policy.action_words`); unchanged without the head."""
        if scores is None or self.action_words is None:
            return logits
        return self.action_words.add(logits, scores)

    def decode(self, token_ids: np.ndarray) -> str:
        """Reply text from sampled ids (stop tokens dropped)."""
        return decode(self.runner.prompts.tokenizer, self.stop_ids, token_ids)

    def reply(self, token_ids: np.ndarray) -> Reply:
        """The reply sent to the env: its text, carrying the ids as sampled up to the closing
        stop token (a conversation prompt puts them back exactly, see :mod:`gym_llm.replies`)."""
        ids = [int(t) for t in token_ids]
        if ids and ids[-1] in self.stop_ids:
            ids.pop()
        return Reply(self.decode(token_ids), ids)

    # --- the update ----------------------------------------------------------------------------

    def evaluate(
        self,
        observations: Sequence[str],
        actions: Sequence[np.ndarray],
        states: Sequence[TurnStates | None] | None,
    ) -> Evaluation:
        """Per-token log-probs, entropy and value of each stored reply, with gradients. Where
        every turn kept its ``states`` only the trainable layers run, and turns that share an
        observation share its prompt's row (whose keys and values every reply attends to)."""
        runner = self.runner
        from_states = runner.starts_from(states)
        if torch.is_grad_enabled():
            self._count_work(observations, actions, from_states)
        tries = self.constraint.tries(observations) if self.constraint is not None else None
        if from_states:
            assert states is not None
            return self._evaluate_from_states(observations, actions, list(states), tries)  # type: ignore[arg-type]
        reply, reply_mask = runner.pad(actions, left=False)
        width = reply.shape[1]
        ids, mask, positions, cache, prompt_width = runner.encode_prompts(
            observations, extra=(reply, reply_mask)
        )
        out = runner.lm(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=cache is not None,
            output_hidden_states=True,
            logits_to_keep=width + 1,
        )
        layer = runner.head_layer(len(out.hidden_states))
        head_input = out.hidden_states[layer][:, prompt_width - 1].float()
        values = runner.values(out.hidden_states[-1][:, prompt_width - 1].float(), head_input)
        scores = self.word_scores(head_input)
        return self._evaluation(out.logits[:, :-1].float(), values, actions, scores, tries)

    def _count_work(
        self, observations: Sequence[str], actions: Sequence[np.ndarray], from_states: bool
    ) -> None:
        """What this update pass computes: each prompt after the shared prefix (a repeated
        prompt once, from states) and every reply token."""
        prompts = self.runner.prompts
        keys = [str(o) for o in observations]
        all_prompts = [prompts.prompt_ids(k) for k in keys]
        size = self.runner.split_prefix(all_prompts)
        lengths = {k: len(p) for k, p in zip(keys, all_prompts, strict=True)}
        rows = list(lengths) if from_states else keys
        reply_tokens = sum(len(a) for a in actions)
        tokens = sum(lengths[key] - size for key in rows) + reply_tokens
        self.runner.count_update(tokens, reply_tokens, size, from_states)

    def _evaluate_from_states(
        self,
        observations: Sequence[str],
        actions: Sequence[np.ndarray],
        states: list[TurnStates],
        tries: list[ReplyAutomaton] | None,
    ) -> Evaluation:
        """:meth:`evaluate` running only the trainable layers on the stored states."""
        runner = self.runner
        keys = [str(o) for o in observations]
        size = runner.split_prefix([runner.prompts.prompt_ids(k) for k in keys])
        rows, firsts = distinct_rows(keys)
        index = torch.tensor(rows, device=runner.device)
        distinct = [states[i] for i in firsts]
        if len(distinct) == len(keys):
            return self._replies_from_states(states, actions, size, tries)
        return self._shared_prompt_replies(distinct, states, index, actions, size, tries)

    def _replies_from_states(
        self,
        states: Sequence[TurnStates],
        actions: Sequence[np.ndarray],
        size: int,
        tries: list[ReplyAutomaton] | None = None,
    ) -> Evaluation:
        """One row per turn: its prompt and its reply's fed-back tokens."""
        runner = self.runner
        top = runner.top
        assert top is not None
        empty = states[0].prompt.new_zeros((0, states[0].prompt.shape[-1]))
        extras = [t.action if t.action is not None else empty for t in states]
        hidden, mask, width = pad_states([runner.suffix_states(t, size) for t in states], extras)
        n = hidden.shape[0]
        if size:
            mask = torch.cat([torch.ones((n, size), dtype=mask.dtype, device=mask.device), mask], 1)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, size:]
        cache = runner.top_prefix_cache(n) if size else None
        final = top(hidden, mask, positions, cache)
        head_input = hidden[:, width - 1].float()  # the first trainable layer's input
        values = runner.values(final[:, width - 1].float(), head_input)
        logits = top.logits(final[:, width - 1 :]).float()
        return self._evaluation(logits, values, actions, self.word_scores(head_input), tries)

    def _shared_prompt_replies(
        self,
        prompts: Sequence[TurnStates],
        turns: Sequence[TurnStates],
        index: torch.Tensor,
        actions: Sequence[np.ndarray],
        size: int,
        tries: list[ReplyAutomaton] | None,
    ) -> Evaluation:
        """Repeated prompts: each distinct prompt once (its keys and values kept), then every
        turn's reply tokens on its prompt's row of that cache."""
        runner = self.runner
        top = runner.top
        assert top is not None
        hidden, mask, width = pad_states([runner.suffix_states(t, size) for t in prompts])
        d = hidden.shape[0]
        if size:
            mask = torch.cat([torch.ones((d, size), dtype=mask.dtype, device=mask.device), mask], 1)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, size:]
        cache = runner.top_prefix_cache(d) if size else top.new_cache()
        final = top(hidden, mask, positions, cache)
        last = final[:, width - 1]
        head_input = hidden[:, width - 1].float()  # the first trainable layer's input
        values = runner.values(last.float(), head_input)[index]
        words = self.word_scores(head_input[index])
        first_logits = top.logits(last)[index].unsqueeze(1)  # (n, 1, V): each reply's 1st token
        n = len(actions)
        cache.batch_select_indices(index)  # every turn's row of its prompt's keys and values
        reply_states = [t.action for t in turns]
        longest = max((r.shape[0] for r in reply_states if r is not None), default=0)
        if not longest:  # one-token replies: nothing was fed back
            return self._evaluation(first_logits.float(), values, actions, words, tries)
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
        return self._evaluation(logits, values, actions, words, tries)

    def _evaluation(
        self,
        logits: torch.Tensor,
        values: torch.Tensor,
        actions: Sequence[np.ndarray],
        scores: torch.Tensor | None,
        tries: list[ReplyAutomaton] | None = None,
    ) -> Evaluation:
        """Per-token log-probs and mean entropy of replies from the LM's logits at the last
        prompt position and at every fed reply token (``(n, >= T, V)``; extra columns are
        ignored) plus the action head's ``scores`` at the action words; with the head, also
        each reply's decision among the actions, and the same with gradients to the head only."""
        reply, reply_mask = self.runner.pad(actions, left=False)
        with_words = self.with_words(logits, scores)
        if tries is not None:  # the mask each reply was sampled under, position by position
            width, vocab = reply.shape[1], with_words.shape[-1]
            allowed = reply_masks(tries, actions, width, vocab, with_words.device)
            with_words = masked(with_words[:, :width], allowed)
            bias = reply_bias(tries, actions, width, vocab, with_words.device)
            if bias is not None:
                with_words = with_words + bias
        lp, valid, entropy = token_evaluation(
            with_words, reply, reply_mask, self.sampling.temperature
        )
        if self.action_words is None or scores is None:
            return Evaluation(lp, valid, entropy, values)
        decision, by_head, found = decisions(
            logits,
            reply,
            valid,
            self.action_words,
            len(self.actions),
            self.sampling.temperature,
            scores,
        )
        return Evaluation(lp, valid, entropy, values, None, decision, found, by_head)

    def scored_tokens(self, actions: Sequence[np.ndarray]) -> tuple[int, int]:
        """``(tokens fed after the reply, positions scored)`` per turn for the update's memory
        estimate: none, and every reply token."""
        return 0, max(len(a) for a in actions)
