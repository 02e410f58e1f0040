"""Choice mode: every listed action is scored as a continuation of the prompt, and the policy
samples from ``softmax(score / temperature)``.

A score is the sum (or per-token mean) of the candidate's token log-probs, minus its score after
a content-free prompt when calibrated ("Calibrate Before Use"), plus the action head's logit when
there is one. The candidates share the prompt's pass: from the cached frozen trunk where the
bottom layers are frozen (:mod:`gym_llm.policy.trunk`), else one prompt pass whose KV cache all
candidates attend to. A rollout scores each distinct observation once per weights version and
samples every turn afresh from those scores. Observations that bring their own actions
(:class:`gym_llm.spaces.TextWithActions`) are scored group by group, each group with its own
candidates (:mod:`gym_llm.policy.state_actions`).

:meth:`ChoiceActions.sample` is the rollout, :meth:`ChoiceActions.evaluate` the update's
re-evaluation with gradients: both reach the same numbers (invariant 1).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from gym_llm.policy.action_head import ActionHead
from gym_llm.policy.arguments import Sampling
from gym_llm.policy.lm import LMRunner
from gym_llm.policy.outputs import Evaluation, PolicyStep
from gym_llm.policy.sampling import categorical_evaluation
from gym_llm.policy.state_actions import MASKED_LOGIT, inverse, pad_columns, state_groups
from gym_llm.policy.top_layers import TurnStates, pad_states
from gym_llm.policy.trunk import FrozenTrunk, distinct_rows, follow_layout, follow_log_probs
from gym_llm.replies import Reply

#: Distinct observations whose choice scores a rollout remembers (see remembered_scores), and
#: the most memory their stored states may take (the rollout buffer shares those tensors).
_MEMO_LIMIT = 4096
_MEMO_MAX_BYTES = 512 * 2**20

#: The observation whose action scores calibration subtracts ("Calibrate Before Use").
CONTENT_FREE_OBSERVATION = "N/A"

#: What makes remembered scores stale: weights, frozen weights, temperature, normalisation,
#: calibration.
ScoresVersion = tuple[tuple[int, float], int, float, str, float | None]


class ChoiceActions:
    """Scores, samples and re-evaluates a choice among listed actions (a part of
    :class:`gym_llm.LLMPolicy`, the strategy of ``action_mode="choice"``)."""

    def __init__(
        self,
        runner: LMRunner,
        actions: tuple[str, ...],
        *,
        per_state: bool,
        sampling: Sampling,
        action_head: ActionHead | None,
    ) -> None:
        self.runner = runner
        #: The actions being scored: the policy's list, or one state group's during its call.
        self.actions = actions
        #: Each observation brings its own actions (``TextActions(per_state=True)``).
        self.per_state = per_state
        #: Temperature, normalisation and memoisation, as the policy has them now.
        self.sampling = sampling
        self.action_head = action_head
        #: Each action's score under a content-free prompt, subtracted from its score.
        self.calibration: torch.Tensor | None = None
        #: The trunk cache, where the bottom layers are frozen (set by :meth:`use_trunk`).
        self.trunk: FrozenTrunk | None = None
        #: The candidates' token ids and mask, ``(K, width)`` each, and each as the reply sent.
        self.candidates: tuple[torch.Tensor, torch.Tensor] | None = None
        self.replies: list[Reply] = []
        if actions and not per_state:
            self.candidates = self._tokenize()
        self._in_group = False
        self._candidate_sets: dict[
            tuple[str, ...], tuple[tuple[torch.Tensor, torch.Tensor], list[Reply]]
        ] = {}
        #: Observation -> (action logits, value, states) under :meth:`scores_version`.
        self._memo: dict[str, tuple[torch.Tensor, torch.Tensor, TurnStates | None]] = {}
        self._memo_version: ScoresVersion | None = None
        self._memo_bytes = 0

    def use_trunk(self, max_mb: float, shared_identity: tuple[object, ...] | None) -> None:
        """Keep each distinct prompt's frozen-layer output for the run (``max_mb <= 0``: off;
        only where the layers below the trainable ones are frozen)."""
        if max_mb > 0 and self.runner.top is not None:
            self.trunk = FrozenTrunk(self.runner, max_mb, shared_identity)

    @property
    def uses_trunk_cache(self) -> bool:
        """Whether passes without gradients start from cached frozen-layer states."""
        return self.trunk is not None and self.runner.uses_rollout_states

    def _tokenize(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The candidates' padded ids and mask; also sets :attr:`replies`, each action as the
        reply it is sent as (its text carrying the tokens that were scored)."""
        tokenizer = self.runner.prompts.tokenizer
        encoded = [tokenizer(a, add_special_tokens=False)["input_ids"] for a in self.actions]
        if any(len(ids) == 0 for ids in encoded):
            raise ValueError(f"Some actions tokenize to nothing: {self.actions!r}.")
        self.replies = [Reply(a, ids) for a, ids in zip(self.actions, encoded, strict=True)]
        return self.runner.pad(encoded, left=False)

    # --- scores --------------------------------------------------------------------------------

    def logits(
        self, token_lp: torch.Tensor, features: torch.Tensor, head: bool = True
    ) -> torch.Tensor:
        """``(n, K, width)`` candidate token log-probs and ``(n, d)`` action-head inputs ->
        ``(n, K)`` action logits (plus the head's, when there is one and ``head``)."""
        assert self.candidates is not None
        cand_mask = self.candidates[1]
        scores = (token_lp * cand_mask.unsqueeze(0)).sum(-1)
        if self.sampling.choice_normalization == "mean":
            scores = scores / cand_mask.sum(-1).unsqueeze(0)
        if self.calibration is not None:
            scores = scores - self.calibration.to(scores.device, scores.dtype)
        scores = scores / self.sampling.temperature
        if self.action_head is not None and head:
            scores = scores + self.action_head(features)
        return scores

    def scores(
        self, observations: Sequence[str]
    ) -> tuple[torch.Tensor, torch.Tensor, list[TurnStates] | None]:
        """``(n, K)`` action logits, ``(n,)`` values and (when collected) each row's states for
        the update."""
        assert self.candidates is not None
        runner = self.runner
        if runner.lm.training and runner.gradient_checkpointing:
            return (*self.uncached_scores(observations), None)
        if self.uses_trunk_cache and not torch.is_grad_enabled():
            return self._scores_from_trunk(observations)
        return self._whole_scores(observations)

    def _whole_scores(
        self, observations: Sequence[str]
    ) -> tuple[torch.Tensor, torch.Tensor, list[TurnStates] | None]:
        """Scores from whole-model passes (prompt, then the candidates on its cache)."""
        token_lp, values, states, features = self._whole_parts(observations)
        return self.logits(token_lp, features), values, states

    def _whole_parts(
        self, observations: Sequence[str]
    ) -> tuple[torch.Tensor, torch.Tensor, list[TurnStates] | None, torch.Tensor]:
        """``(n, K, width)`` candidate token log-probs, values, states and head features."""
        assert self.candidates is not None
        runner = self.runner
        cand_ids, cand_mask = self.candidates
        logits, values, cache, mask, states, features = runner.prompt_pass(observations)
        n, k, width = mask.shape[0], cand_ids.shape[0], cand_ids.shape[1]
        first = torch.log_softmax(logits.float(), dim=-1)  # (n, V) next-token dist
        # First candidate token: from the shared prompt pass.
        token_lp = first[:, cand_ids[:, 0]].unsqueeze(-1)  # (n, K, 1)
        if width > 1:
            cache.batch_repeat_interleave(k)
            full_mask, positions = follow_layout(mask, cand_mask)
            with runner.capturing() as captured:
                out = runner.lm(
                    input_ids=cand_ids[:, :-1].repeat(n, 1),  # all but each candidate's last
                    attention_mask=full_mask,
                    position_ids=positions,
                    past_key_values=cache,
                    use_cache=True,
                )
            token_lp = torch.cat([token_lp, follow_log_probs(out.logits, cand_ids, n)], dim=-1)
            if states is not None and captured:
                follow = captured[0].view(n, k, width - 1, -1)
                for i, turn in enumerate(states):
                    turn.action = follow[i]
        return token_lp, values, states, features

    def _scores_from_trunk(
        self, observations: Sequence[str]
    ) -> tuple[torch.Tensor, torch.Tensor, list[TurnStates]]:
        """:meth:`scores` with the trunk cache: observations whose frozen-layer states are
        cached run only the trainable layers; the others run the whole model once (the cost
        they had without the cache), which keeps their states for next time. One row per
        distinct observation; the states go to the update as they are."""
        runner, trunk = self.runner, self.trunk
        assert trunk is not None and self.candidates is not None
        keys = [str(o) for o in observations]
        rows, firsts = distinct_rows(keys)
        distinct = [keys[i] for i in firsts]
        prompts = [tuple(runner.prompts.prompt_ids(k)) for k in distinct]
        cache = trunk.current()  # the frozen weights checked once per call
        found = [trunk.cached(p, cache) for p in prompts]
        misses = [i for i, hit in enumerate(found) if hit is None]
        hits = [i for i, hit in enumerate(found) if hit is not None]
        logits = torch.empty((len(distinct), self.candidates[0].shape[0]), device=runner.device)
        values = torch.empty(len(distinct), device=runner.device)
        if misses:
            with runner.keeping_states(True):
                miss_logits, miss_values, computed = self._whole_scores(
                    [distinct[i] for i in misses]
                )
            assert computed is not None
            for i, turn in zip(misses, computed, strict=True):
                found[i] = trunk.keep(prompts[i], turn, cache)
            logits[misses], values[misses] = miss_logits, miss_values
        if hits:
            states = [found[i] for i in hits]
            size = runner.split_prefix([list(prompts[i]) for i in hits])
            logits[hits], values[hits] = self.top_scores(states, size)  # type: ignore[arg-type]
        index = torch.tensor(rows, device=runner.device)
        return logits[index], values[index], [found[r] for r in rows]  # type: ignore[misc]

    def top_scores(
        self, states: Sequence[TurnStates], size: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(n, K)`` action logits and ``(n,)`` values of the trainable layers on ``states``
        (the prompts' shared prefix of ``size`` tokens in a cache), with gradients if enabled."""
        runner = self.runner
        top, candidates = runner.top, self.candidates
        assert top is not None and candidates is not None
        cand_ids, cand_mask = candidates
        hidden, mask, width = pad_states([runner.suffix_states(t, size) for t in states])
        n = hidden.shape[0]
        if size:
            mask = torch.cat([torch.ones((n, size), dtype=mask.dtype, device=mask.device), mask], 1)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, size:]
        multi_token = cand_ids.shape[1] > 1
        cache: Any = (
            runner.top_prefix_cache(n) if size else (top.new_cache() if multi_token else None)
        )
        final = top(hidden, mask, positions, cache)
        # the head reads the first trainable layer's input: the states the top layers start from
        head_input = hidden[:, width - 1].float()
        values = runner.values(final[:, width - 1].float(), head_input)
        first = torch.log_softmax(top.logits(final[:, width - 1]).float(), dim=-1)
        token_lp = first[:, cand_ids[:, 0]].unsqueeze(-1)
        if multi_token:
            k, cand_width = cand_ids.shape
            cache.batch_repeat_interleave(k)
            follow = torch.stack([t.action for t in states])  # type: ignore[misc]
            follow = follow.reshape(n * k, cand_width - 1, -1).clone()
            full_mask, follow_positions = follow_layout(mask, cand_mask)
            out = top(follow, full_mask, follow_positions, cache)
            follow_lp = follow_log_probs(top.logits(out), cand_ids, n)
            token_lp = torch.cat([token_lp, follow_lp], dim=-1)
        return self.logits(token_lp, head_input), values

    def uncached_scores(self, observations: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores from whole (prompt + candidate) sequences, without any KV cache.

        K times the compute of the cached path; used where caches are unavailable (training with
        gradient checkpointing) and as the reference the cached path is tested against.
        """
        assert self.candidates is not None
        runner = self.runner
        cand_ids, cand_mask = self.candidates
        prompts = [runner.prompts.prompt_ids(str(o)) for o in observations]
        ids, mask = runner.pad(prompts, left=True)
        n, k, width = ids.shape[0], cand_ids.shape[0], cand_ids.shape[1]
        full_ids = torch.cat([ids.repeat_interleave(k, 0), cand_ids.repeat(n, 1)], -1)
        full_mask = torch.cat([mask.repeat_interleave(k, 0), cand_mask.repeat(n, 1)], -1)
        out = runner.lm(
            input_ids=full_ids,
            attention_mask=full_mask,
            position_ids=(full_mask.cumsum(-1) - 1).clamp(min=0),
            output_hidden_states=True,
            logits_to_keep=width + 1,
        )
        log_dist = torch.log_softmax(out.logits[:, :-1].float(), dim=-1)
        token_lp = log_dist.gather(-1, cand_ids.repeat(n, 1).unsqueeze(-1)).squeeze(-1)
        last_prompt = out.hidden_states[-1][::k, ids.shape[1] - 1].float()
        layer = runner.head_layer(len(out.hidden_states))
        head_input = out.hidden_states[layer][::k, ids.shape[1] - 1].float()
        values = runner.values(last_prompt, head_input)
        return self.logits(token_lp.view(n, k, width), head_input), values

    def scores_version(self) -> ScoresVersion:
        """Changes whenever the scores could: a trainable weight, a frozen one (with the trunk
        cache), the temperature, the normalisation or the calibration constants."""
        calibration = self.calibration
        return (
            self.runner.weights_version(),
            self.trunk.weights_version() if self.trunk is not None and self.uses_trunk_cache else 0,
            self.sampling.temperature,
            self.sampling.choice_normalization,
            None if calibration is None else float(calibration.double().sum()),
        )

    def remembered_scores(
        self, observations: Sequence[str]
    ) -> tuple[torch.Tensor, torch.Tensor, list[TurnStates] | None]:
        """:meth:`scores` with each distinct observation scored once per weights version.

        Envs revisit observations all the time (Blackjack has 280 states, KeywordBandit 4 per
        option set), and under the same weights a prompt's scores and value are the same numbers,
        so a rollout scores each distinct observation once and samples every turn afresh from
        them. The memory is forgotten whenever :meth:`scores_version` changes (any trainable
        weight, the temperature, the normalisation, the calibration).
        """
        if (
            not self.sampling.memoize_choice_scores
            or torch.is_grad_enabled()
            or self.runner.reference_mode
        ):
            return self.scores(observations)
        version = self.scores_version()
        keys = [str(o) for o in observations]
        need_states = self.runner.collects_states()
        memo = self._memo
        todo = list(
            dict.fromkeys(k for k in keys if k not in memo or (need_states and memo[k][2] is None))
        )
        if version != self._memo_version or len(memo) + len(todo) > _MEMO_LIMIT:
            self.forget()
            self._memo_version = version
            todo = list(dict.fromkeys(keys))
        if todo:
            logits, values, states = self.scores(todo)
            added = sum(t.nbytes for t in states) if states else 0
            if self._memo_bytes + added > _MEMO_MAX_BYTES:
                self.forget()  # keep this batch's entries only
                self._memo_version = version
            for i, key in enumerate(todo):
                memo[key] = (logits[i], values[i], states[i] if states else None)
            self._memo_bytes += added
        rows = [memo[k] for k in keys]
        remembered = [r[2] for r in rows]
        turn_states = [s for s in remembered if s is not None]
        return (
            torch.stack([r[0] for r in rows]),
            torch.stack([r[1] for r in rows]),
            turn_states if len(turn_states) == len(rows) else None,
        )

    def forget(self) -> None:
        """Drop the remembered scores (they follow :meth:`scores_version` anyway)."""
        self._memo.clear()
        self._memo_bytes = 0

    def prior_scores(self, observations: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(n, K)`` log-probs of the listed actions as the policy starts (the LM with its
        adapter off, the calibration as set, no action head) and ``(n, d)`` features (see
        :meth:`gym_llm.LLMPolicy.prior_choice_scores`)."""
        runner = self.runner
        with torch.no_grad(), runner.without_states(), runner.reference():
            token_lp, _, _, features = self._whole_parts(list(observations))
            logits = self.logits(token_lp, features, head=False)
        return torch.log_softmax(logits.float(), dim=-1), features

    def content_free_scores(self) -> torch.Tensor:
        """Each action's score (sum or mean of its token log-probs) after the content-free
        observation ``"N/A"`` ("Calibrate Before Use", Zhao et al. 2021): the model's prior
        over the action strings, which calibration divides out of the policy."""
        calibration, self.calibration = self.calibration, None
        try:
            with torch.no_grad(), self.runner.without_states():
                logits, _, _ = self.scores([CONTENT_FREE_OBSERVATION])
        finally:
            self.calibration = calibration
        return (logits[0] * self.sampling.temperature).detach()

    # --- per-state action lists ----------------------------------------------------------------

    def _splits(self) -> bool:
        return self.per_state and not self._in_group

    @contextlib.contextmanager
    def candidates_for(self, actions: tuple[str, ...]) -> Iterator[None]:
        """Score ``actions`` as if they were the policy's fixed list."""
        saved = (self.candidates, self.replies, self.actions)
        self._in_group = True
        self.actions = actions
        try:
            entry = self._candidate_sets.get(actions)
            if entry is None:
                # Normal tensors even when first met in a rollout's inference mode: the update
                # indexes with them under autograd.
                with torch.inference_mode(False):
                    candidates = self._tokenize()  # sets replies
                entry = (candidates, self.replies)
                if len(self._candidate_sets) >= 4096:  # games with endless lists: bounded
                    self._candidate_sets.clear()
                self._candidate_sets[actions] = entry
            self.candidates, self.replies = entry
            yield
        finally:
            self.candidates, self.replies, self.actions = saved
            self._in_group = False

    # --- the rollout ---------------------------------------------------------------------------

    def sample(self, observations: Sequence[str], deterministic: bool) -> PolicyStep:
        """An action per observation with its exact log-prob, the value, the states for the
        update and every action's probability."""
        if self._splits():
            return self._sample_in_groups(observations, deterministic)
        logits, values, states = self.remembered_scores(observations)
        dist = torch.distributions.Categorical(logits=logits)
        chosen = logits.argmax(-1) if deterministic else dist.sample()
        lps = dist.log_prob(chosen).float().cpu().numpy()
        indices = chosen.cpu().numpy()
        return PolicyStep(
            replies=[self.replies[int(i)] for i in indices],
            actions=[np.array([int(i)], dtype=np.int64) for i in indices],
            token_log_probs=[np.array([lp], dtype=np.float32) for lp in lps],
            values=values,
            states=states,
            action_probs=dist.probs.float().cpu().numpy(),
        )

    def _sample_in_groups(self, observations: Sequence[str], deterministic: bool) -> PolicyStep:
        """:meth:`sample` per group of observations sharing an action list, in row order."""
        n = len(observations)
        replies: list[str] = [""] * n
        actions: list[np.ndarray] = [np.zeros(1, dtype=np.int64)] * n
        log_probs: list[np.ndarray] = [np.zeros(1, dtype=np.float32)] * n
        states: list[TurnStates | None] = [None] * n
        values = torch.empty(n, device=self.runner.device)
        probs: list[np.ndarray] = [np.zeros(0)] * n
        for group_actions, rows in state_groups(observations):
            with self.candidates_for(group_actions):
                step = self.sample([observations[r] for r in rows], deterministic)
            values[torch.tensor(rows, device=self.runner.device)] = step.values.to(values.dtype)
            for j, row in enumerate(rows):
                replies[row], actions[row] = step.replies[j], step.actions[j]
                log_probs[row] = step.token_log_probs[j]
                states[row] = step.states[j] if step.states is not None else None
                probs[row] = step.action_probs[j] if step.action_probs is not None else probs[row]
        width = max(len(p) for p in probs)
        padded = np.zeros((n, width), dtype=np.float32)
        for row, p in enumerate(probs):
            padded[row, : len(p)] = p
        return PolicyStep(
            replies=replies,
            actions=actions,
            token_log_probs=log_probs,
            values=values,
            states=None if any(s is None for s in states) else states,  # type: ignore[arg-type]
            action_probs=padded,
        )

    # --- the update ----------------------------------------------------------------------------

    def evaluate(
        self,
        observations: Sequence[str],
        actions: Sequence[np.ndarray],
        states: Sequence[TurnStates | None] | None,
    ) -> Evaluation:
        """Log-prob, entropy and value of each stored action, with gradients. Where every turn
        kept its ``states`` the pass starts at the first trainable layer, and turns that share an
        observation share one row of it (its scores and value), so autograd sums their
        gradients exactly as separate rows would."""
        if self._splits():
            return self._evaluate_in_groups(observations, actions, states)
        runner = self.runner
        from_states = runner.starts_from(states)
        keys = [str(o) for o in observations]
        if torch.is_grad_enabled():
            self._count_work(keys, from_states)
        if not from_states:
            logits, values, _ = self.scores(observations)
            return self._evaluation(logits, values, actions)
        assert states is not None
        size = runner.split_prefix([runner.prompts.prompt_ids(k) for k in keys])
        rows, firsts = distinct_rows(keys)
        index = torch.tensor(rows, device=runner.device)
        logits, values = self.top_scores([states[i] for i in firsts], size)  # type: ignore[misc]
        return self._evaluation(logits[index], values[index], actions)

    def _count_work(self, keys: list[str], from_states: bool) -> None:
        """What this update pass computes: each prompt after the shared prefix (once per
        distinct observation from states) and every candidate's tokens but its first."""
        assert self.candidates is not None
        prompts = self.runner.prompts
        lengths = {k: len(prompts.prompt_ids(k)) for k in keys}
        size = self.runner.split_prefix([prompts.prompt_ids(k) for k in keys])
        rows = list(dict.fromkeys(keys)) if from_states else keys
        k, width = self.candidates[0].shape
        follow = k * (width - 1)
        tokens = sum(lengths[key] - size + follow for key in rows)
        self.runner.count_update(tokens, len(rows) * (1 + follow), size, from_states)

    def _evaluation(
        self, logits: torch.Tensor, values: torch.Tensor, actions: Sequence[np.ndarray]
    ) -> Evaluation:
        index = torch.tensor([int(a[0]) for a in actions], device=self.runner.device)
        lp, entropy, everything = categorical_evaluation(logits, index)
        return Evaluation(lp, torch.ones_like(lp, dtype=torch.bool), entropy, values, everything)

    def _evaluate_in_groups(
        self,
        observations: Sequence[str],
        actions: Sequence[np.ndarray],
        states: Sequence[TurnStates | None] | None,
    ) -> Evaluation:
        """:meth:`evaluate` per group, merged in row order, gradients flowing through every
        group."""
        order: list[int] = []
        parts: list[Evaluation] = []
        for group_actions, rows in state_groups(observations):
            sub_states = None if states is None else [states[r] for r in rows]
            with self.candidates_for(group_actions):
                parts.append(
                    self.evaluate(
                        [observations[r] for r in rows], [actions[r] for r in rows], sub_states
                    )
                )
            order.extend(rows)
        back = inverse(order).to(self.runner.device)
        choice = [p.choice_log_probs for p in parts]
        return Evaluation(
            token_log_probs=torch.cat([p.token_log_probs for p in parts])[back],
            mask=torch.cat([p.mask for p in parts])[back],
            entropy=torch.cat([p.entropy for p in parts])[back],
            values=torch.cat([p.values for p in parts])[back],
            choice_log_probs=None
            if any(c is None for c in choice)
            else pad_columns(choice, MASKED_LOGIT)[back],  # type: ignore[arg-type]
        )

    def scored_tokens(self, actions: Sequence[np.ndarray]) -> tuple[int, int]:
        """``(tokens fed after the reply, positions scored)`` per turn for the update's memory
        estimate: every candidate's tokens but its first, and every candidate token."""
        if self.candidates is None:
            return 0, max(len(a) for a in actions)
        k, width = self.candidates[0].shape
        return k * (width - 1), k * width
