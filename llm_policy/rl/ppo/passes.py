"""One minibatch's forward/backward passes: how many turns a pass holds, which turns share a
row, and the gradients accumulated over the passes.

A minibatch rarely fits one pass of an LLM, so the update splits it by memory and sums the
passes' losses, each weighted by its share of the minibatch: the step is the one a single pass
over the whole minibatch would take (tested). Where the policy scores listed actions from the
rollout's stored states, turns that share an observation share one row, and the rows go into
passes by length (:func:`~gym_llm.rl.ppo.buffer.grouped_passes`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from gym_llm.policy.llm_policy import LLMPolicy
from gym_llm.rl.common.sharding import is_sharded, lockstep_rows
from gym_llm.rl.ppo.buffer import TextBatch, grouped_passes
from gym_llm.rl.ppo.config import PPOConfig
from gym_llm.rl.ppo.loss import LossSettings, ppo_loss
from gym_llm.rl.ppo.loss_terms import listed_kl

#: Memory (MB) the update's activations may take on the CPU when ``micro_batch_size=None``.
UPDATE_MEMORY_BUDGET_MB = 1536


@dataclass
class Gradients:
    """What one minibatch's passes leave besides the gradients themselves."""

    #: Each pass's approximate KL to the rollout policy (target-KL early stopping).
    kl: list[float] = field(default_factory=list)
    #: Each pass's entropy weighted by its share of the minibatch (``ent_coef="auto"``).
    entropy: list[float] = field(default_factory=list)
    #: ``target_entropy_of="marginal"``: each pass's probabilities of the listed actions.
    probs: list[torch.Tensor] = field(default_factory=list)
    #: A non-finite value or loss in a pass (the NaN guard skips the step).
    bad_cause: str | None = None
    #: max |ratio - 1| over the passes.
    max_ratio_error: float = 0.0


def _rows(table: dict[str, torch.Tensor], observations: Sequence[str]) -> torch.Tensor:
    """``(n, K)``: each observation's row of a per-observation table, in the pass's order."""
    return torch.stack([table[str(o)] for o in observations])


def pad_log_probs(arrays: list[np.ndarray], width: int, device: torch.device) -> torch.Tensor:
    """Per-token log-probs of different lengths as one ``(n, width)`` tensor, zeros after each."""
    out = torch.zeros((len(arrays), width), dtype=torch.float32)
    for i, a in enumerate(arrays):
        out[i, : len(a)] = torch.as_tensor(a, dtype=torch.float32)
    return out.to(device)


class UpdatePasses:
    """The passes of PPO's update over one minibatch, for ``policy`` with ``config``'s settings
    (read at every call: a setting changed between ``learn`` calls takes effect)."""

    def __init__(self, policy: LLMPolicy, config: PPOConfig, device: torch.device) -> None:
        self.policy, self.config, self.device = policy, config, device

    def rows_are_shared(self, batch: TextBatch, lockstep: bool) -> bool:
        """Whether turns that share an observation share one row of a pass (listed actions
        scored from stored states, micro-batches sized by memory)."""
        return (
            self.config.micro_batch_size is None
            and not lockstep
            and batch.states is not None
            and self.policy.scores_listed_actions
            and self.policy.uses_rollout_states
        )

    def rows_per_pass(self, observations: Sequence[str], actions: Sequence[np.ndarray]) -> int:
        """Rows per forward/backward pass: as set, or as many as fit the memory budget."""
        if self.config.micro_batch_size is not None:
            return self.config.micro_batch_size
        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            budget = free / 4
        else:
            budget = UPDATE_MEMORY_BUDGET_MB * 2**20
        per_turn = self.policy.update_bytes_per_turn(observations, actions)
        return max(1, min(len(observations), int(budget // max(per_turn, 1))))

    def accumulate(
        self,
        batch: TextBatch,
        advantages: torch.Tensor,
        settings: LossSettings,
        value_scale: float,
        targets: dict[str, torch.Tensor] | None,
        stats: dict[str, list[float]],
        old_probs: dict[str, torch.Tensor] | None = None,
    ) -> Gradients:
        """One minibatch's gradients, accumulated over passes of as many turns as fit (turns
        that share an observation share a row where the policy scores listed actions from
        stored states); each pass's loss weighted by its share of the minibatch. ``stats``
        gets each pass's figures. With ``old_probs`` (each observation's rollout policy over
        the listed actions) the KL to the rollout policy is exact over those actions rather
        than the k3 estimate from the actions played."""
        policy, config = self.policy, self.config
        lockstep = is_sharded(policy.lm)
        n = len(batch.observations)
        grads = Gradients()
        rows = self.rows_per_pass(batch.observations, batch.actions)
        if lockstep:  # FSDP: as many passes in every process
            rows = lockstep_rows(n, rows)
        passes = [slice(start, start + rows) for start in range(0, n, rows)]
        if self.rows_are_shared(batch, lockstep):
            # One row per distinct observation: each observation's turns in one pass, as many
            # observations per pass as fit (the loss is a sum over turns).
            assert batch.states is not None  # rows_are_shared
            lengths = [turn.offset + turn.prompt.shape[0] for turn in batch.states]
            order, passes = grouped_passes(batch.observations, rows, lengths)
            batch, advantages = batch.take(order), advantages[order]
        stats["rows_per_pass"].append(n / len(passes))
        for part in passes:
            observations, actions = batch.observations[part], batch.actions[part]
            states = batch.states[part] if batch.states is not None else None
            ev = policy.evaluate_actions(observations, actions, states)
            old = pad_log_probs(
                batch.old_token_log_probs[part], ev.token_log_probs.shape[1], self.device
            )
            wanted = (
                _rows(targets, observations)
                if targets is not None and ev.choice_log_probs is not None
                else None
            )
            ref = (
                policy.reference_log_probs(observations, actions, states)
                if config.kl_coef > 0
                else None
            )
            terms = ppo_loss(
                ev, old, advantages[part], batch.returns[part], batch.old_values[part],
                settings, value_scale=value_scale, targets=wanted, ref_log_probs=ref,
            )  # fmt: skip
            if terms.floor is not None:
                stats["floor"].append(terms.floor.item())
            if terms.kl_ref is not None:
                stats["kl_ref"].append(terms.kl_ref.item())
            if grads.bad_cause is None and not torch.isfinite(ev.values.detach()).all():
                grads.bad_cause = "value"
            elif grads.bad_cause is None and not torch.isfinite(terms.loss.detach()):
                grads.bad_cause = "loss"
            (terms.loss * (len(observations) / n)).backward()
            grads.max_ratio_error = max(grads.max_ratio_error, terms.surrogate.max_ratio_error)
            kl = (
                listed_kl(_rows(old_probs, observations), ev.choice_log_probs)
                if old_probs is not None and ev.choice_log_probs is not None
                else terms.surrogate.approx_kl
            )
            grads.kl.append(kl)
            stats["pg"].append(terms.policy.item())
            stats["value"].append(terms.value.item())
            stats["entropy"].append(terms.entropy.item())
            grads.entropy.append(-terms.entropy.item() * len(observations) / n)
            if config.target_entropy_of == "marginal" and terms.listed is not None:
                grads.probs.append(terms.listed.detach().exp())
            stats["approx_kl"].append(kl)
            stats["clip_fraction"].append(terms.surrogate.clip_fraction)
        return grads
