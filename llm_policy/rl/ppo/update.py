"""The PPO update over a text rollout: clipped surrogate per action token, micro-batches sized
by memory, gradient accumulation, target-KL early stopping, the reference-model KL penalty and
the critic's warm-up. Part of :class:`gym_llm.PPO` (the loss math is in :mod:`gym_llm.rl.ppo.losses`).
"""

from __future__ import annotations

import contextlib
import warnings
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import numpy as np
import torch
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.type_aliases import Schedule
from stable_baselines3.common.utils import explained_variance
from torch.nn.utils import get_total_norm

from gym_llm.policy.value_head import ValueHead
from gym_llm.rl.common.distributed import (
    any_process,
    average_gradients,
    from_main_process,
    global_mean,
    global_moments,
    same_in_every_process,
    world_size,
)
from gym_llm.rl.common.sharding import (
    clip_grad_norm,
    is_sharded,
    lockstep_rows,
    refresh,
    sharded_update,
)
from gym_llm.rl.ppo.buffer import TextBatch, grouped_passes
from gym_llm.rl.ppo.entropy_control import floor_loss, held_entropy, marginal_entropy, next_ent_coef
from gym_llm.rl.ppo.losses import clipped_surrogate, entropy_bonus, k3_kl, value_loss
from gym_llm.rl.ppo.rollout import RolloutCollection
from gym_llm.rl.ppo.target_update import rollout_targets, target_cross_entropy

#: ``train/NAME``: the mean over the update's passes of ``stats[KEY]`` (logged where it has any).
MEAN_FIGURES = (
    ("policy_gradient_loss", "pg"),
    ("value_loss", "value"),
    ("entropy_loss", "entropy"),
    ("approx_kl", "approx_kl"),
    ("clip_fraction", "clip_fraction"),
    ("floor_loss", "floor"),
    ("kl_ref", "kl_ref"),
)

#: Memory (MB) the update's activations may take on the CPU when ``micro_batch_size=None``.
UPDATE_MEMORY_BUDGET_MB = 1536


def _pad(arrays: list[np.ndarray], width: int, device: torch.device) -> torch.Tensor:
    out = torch.zeros((len(arrays), width), dtype=torch.float32)
    for i, a in enumerate(arrays):
        out[i, : len(a)] = torch.as_tensor(a, dtype=torch.float32)
    return out.to(device)


def _finite_mean(values: list[float]) -> float:
    """The mean of the finite values (a skipped step's infinite norm would hide the rest)."""
    finite = [v for v in values if np.isfinite(v)]
    return float(np.mean(finite)) if finite else float("nan")


class NonFiniteTrainingError(FloatingPointError):
    """Too many optimizer steps in a row had a non-finite loss, gradient or value."""


class PPOUpdate(RolloutCollection):
    """``train()``: the update, and how it centres, scales and batches the turns."""

    batch_size: int
    n_epochs: int
    clip_range: Schedule
    normalize_advantage: bool
    target_kl: float | None
    kl_coef: float
    ent_coef: float
    #: ``ent_coef="auto"``: the coefficient follows the entropy's gap to ``target_entropy``.
    ent_coef_auto: bool
    target_entropy: float | None
    target_entropy_of: str
    min_action_prob: float
    policy_update: str
    kl_step: float
    micro_batch_size: int | None
    clip_range_vf: float | None
    critic_warmup_steps: int
    #: max |ratio - 1| on the first minibatch of the last update (invariant: ~0).
    first_ratio_error: float
    #: Mean turns per forward/backward pass in the last update (micro_batch_size or auto).
    turns_per_pass: float
    #: Running std of every advantage so far: the scale of normalize_advantage.
    advantage_scale: RunningMeanStd
    _shuffle_rng: np.random.Generator
    #: Optimizer steps skipped by the NaN guard over the run (``train/skipped_steps``).
    skipped_steps: int
    #: Turns of the last rollout left out of the update for a non-finite advantage or return.
    nonfinite_turns: int
    #: The NaN guard stops training after this many skipped steps in a row.
    max_consecutive_skips: int
    _consecutive_skips: int
    last_checkpoint: Path | None

    def train(self) -> None:
        """Clipped-surrogate PPO over ``n_epochs`` of shuffled minibatches of turns (with
        gradients and optimizer sharded under FSDP: :mod:`gym_llm.rl.common.sharding`)."""
        lm = self.policy.lm
        self._calibrate_action_head()
        with sharded_update(lm) if is_sharded(lm) else contextlib.nullcontext():
            self._train()

    def _adapt_ent_coef(self, entropy: float) -> None:
        """``ent_coef="auto"``: after a step, from its minibatch's ``entropy`` (of states or
        marginal: ``target_entropy_of``)."""
        k = len(self.policy.actions_list)
        self.ent_coef = next_ent_coef(self.ent_coef, entropy, self.target_entropy, k)

    def _calibrate_action_head(self) -> None:
        """Before the first step, the action head's centre and scale from this rollout's
        distinct observations (the main process's, so that every process holds the same)."""
        head = self.policy.action_head
        if head is None or head.is_calibrated:
            return
        seen = dict.fromkeys(str(o) for o in self.rollout_buffer.observations_text.reshape(-1))
        self.policy.calibrate_action_head(from_main_process(list(seen)))

    def _train(self) -> None:
        lockstep = is_sharded(self.policy.lm)
        centre, scale = self._advantage_normalisation()
        value_scale = self._update_value_statistics()
        targets = self._choice_targets(centre, scale) if self.policy_update == "target" else None
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        clip = self.clip_range(self._current_progress_remaining)
        stats: defaultdict[str, list[float]] = defaultdict(list)
        continue_training, first, first_error = True, True, 0.0
        epoch = 0
        finite = self.rollout_buffer.finite_turns()
        same_in_every_process(int(finite.sum()), "The number of finite turns")
        if not finite.any():  # nothing to learn from: one skip
            self.policy.set_training_mode(False)
            self._skip_step("advantage or return in every turn", [])
            self.logger.record("train/skipped_steps", self.skipped_steps)
            self.logger.record("train/nonfinite_turns", self.nonfinite_turns)
            return
        warmup = self.num_timesteps <= self.critic_warmup_steps
        # The optimizer's parameters: under FSDP the shards it steps (the module holds the
        # gathered whole weights, whose gradients FSDP moves to the shards).
        trainable = [p for group in self.policy.optimizer.param_groups for p in group["params"]]
        value_ids = {id(p) for p in self.policy.value_head.parameters()}
        frozen_now = (  # during the critic's warm-up the policy's weights wait
            [p for p in trainable if id(p) not in value_ids] if warmup else []
        )
        for epoch in range(self.n_epochs):
            for batch in self.rollout_buffer.minibatches(self.batch_size, self._shuffle_rng):
                advantages = (batch.advantages - centre) / scale
                self.policy.optimizer.zero_grad(set_to_none=True)
                n = len(batch.observations)
                batch_kl: list[float] = []
                batch_entropy: list[float] = []
                batch_probs: list[torch.Tensor] = []  # target_entropy_of="marginal"
                bad_cause: str | None = None
                rows = self._rows_per_pass(batch.observations, batch.actions)
                if lockstep:  # FSDP: as many passes in every process
                    rows = lockstep_rows(n, rows)
                passes = [slice(start, start + rows) for start in range(0, n, rows)]
                if self._rows_are_shared(batch, lockstep):
                    # One row per distinct observation: each observation's turns in one pass,
                    # as many observations per pass as fit (the loss is a sum over turns).
                    order, passes = grouped_passes(batch.observations, rows)
                    batch, advantages = batch.take(order), advantages[order]
                stats["rows_per_pass"].append(n / len(passes))
                for part in passes:
                    observations, actions = batch.observations[part], batch.actions[part]
                    states = batch.states[part] if batch.states is not None else None
                    ev = self.policy.evaluate_actions(observations, actions, states)
                    mask = ev.mask.float()
                    old = _pad(
                        batch.old_token_log_probs[part], ev.token_log_probs.shape[1], self.device
                    )
                    surrogate = clipped_surrogate(
                        ev.token_log_probs, old, advantages[part], mask, clip
                    )
                    critic = value_loss(  # in the head's units when normalising
                        ev.values, batch.returns[part], batch.old_values[part], self.clip_range_vf
                    ) / (value_scale**2)
                    row_entropy, listed = held_entropy(ev, self.ent_coef_auto)
                    entropy = entropy_bonus(row_entropy)
                    policy_loss = surrogate.loss
                    if targets is not None and ev.choice_log_probs is not None:
                        wanted = torch.stack([targets[str(o)] for o in observations])
                        policy_loss = target_cross_entropy(ev.choice_log_probs, wanted)
                    loss = policy_loss + self.ent_coef * entropy + self.vf_coef * critic
                    if self.min_action_prob > 0:
                        loss = loss + (floor := floor_loss(ev, self.min_action_prob))
                        stats["floor"].append(floor.item())
                    if self.kl_coef > 0:
                        ref = self.policy.reference_log_probs(observations, actions, states)
                        kl_ref = k3_kl(ev.token_log_probs, ref, mask)
                        loss = loss + self.kl_coef * kl_ref
                        stats["kl_ref"].append(kl_ref.item())
                    if bad_cause is None and not torch.isfinite(ev.values.detach()).all():
                        bad_cause = "value"
                    elif bad_cause is None and not torch.isfinite(loss.detach()):
                        bad_cause = "loss"
                    (loss * (len(observations) / n)).backward()
                    if first:
                        first_error = max(first_error, surrogate.max_ratio_error)
                    batch_kl.append(surrogate.approx_kl)
                    stats["pg"].append(policy_loss.item())
                    stats["value"].append(critic.item())
                    stats["entropy"].append(entropy.item())
                    batch_entropy.append(-entropy.item() * len(observations) / n)
                    if self.target_entropy_of == "marginal" and listed is not None:
                        batch_probs.append(listed.detach().exp())
                    stats["approx_kl"].append(surrogate.approx_kl)
                    stats["clip_fraction"].append(surrogate.clip_fraction)
                if first:
                    self.first_ratio_error, first = first_error, False
                kl = global_mean(float(np.mean(batch_kl))) if self.target_kl is not None else 0.0
                if self.target_kl is not None and kl > 1.5 * self.target_kl:
                    continue_training = False
                    if self.verbose >= 1:
                        print(
                            f"Early stopping at epoch {epoch} (approx_kl {np.mean(batch_kl):.4f})"
                        )
                    break
                average_gradients(trainable)  # data-parallel: the mean over the processes
                for param in frozen_now:
                    param.grad = None
                value_grads = [
                    p.grad for p in self.policy.value_head.parameters() if p.grad is not None
                ]
                stats["value_grad_norm"].append(float(get_total_norm(value_grads)))
                if lockstep:  # sharded and whole gradients
                    norm = clip_grad_norm(trainable, self.max_grad_norm)
                else:
                    norm = torch.nn.utils.clip_grad_norm_(trainable, self.max_grad_norm)
                stats["grad_norm"].append(float(norm))
                cause = bad_cause or ("gradient" if not torch.isfinite(norm) else None)
                if cause is None and any_process(bad_cause is not None):
                    cause = "loss or value in another process"
                if cause is not None:  # the NaN guard: this step never reaches the weights
                    self.policy.optimizer.zero_grad(set_to_none=True)
                    self._skip_step(cause, batch.observations)
                    continue
                self._consecutive_skips = 0
                self.policy.optimizer.step()
                if lockstep:  # the whole weights from the stepped shards
                    refresh(self.policy.lm)
                if self.ent_coef_auto:
                    if self.target_entropy_of == "marginal":  # over every process already
                        held = marginal_entropy(batch_probs)
                    else:
                        held = global_mean(float(np.sum(batch_entropy)))
                    self._adapt_ent_coef(held)
                self._n_updates += 1
            if not continue_training:
                break
        self.policy.set_training_mode(False)
        values = self.rollout_buffer.values.flatten()
        returns = self.rollout_buffer.returns.flatten()
        for name, key in MEAN_FIGURES:
            if stats[key]:
                self.logger.record(f"train/{name}", float(np.mean(stats[key])))
        self.logger.record("train/ent_coef", self.ent_coef)
        self.logger.record("train/explained_variance", float(explained_variance(values, returns)))
        # The critic's offset: explained variance cannot see a value head that is off by a
        # constant, which is what a head too slow for the returns' scale looks like.
        self.logger.record("train/value_offset", float(np.mean(values - returns)))
        self.logger.record("train/return_mean", float(np.mean(returns)))
        # Before clipping: when the value head's share is most of it, the global clip to
        # max_grad_norm shrinks the policy's step too.
        self.logger.record("train/grad_norm", _finite_mean(stats["grad_norm"]))
        self.logger.record("train/value_grad_norm", _finite_mean(stats["value_grad_norm"]))
        self.logger.record("train/first_ratio_error", self.first_ratio_error)
        self.logger.record("train/early_stopped", int(not continue_training))
        self.logger.record("train/epochs", epoch + 1)
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/clip_range", clip)
        self.logger.record("train/critic_warmup", int(warmup))
        self.logger.record("train/skipped_steps", self.skipped_steps)
        self.logger.record("train/nonfinite_turns", self.nonfinite_turns)
        self.turns_per_pass = float(np.mean(stats["rows_per_pass"]))
        self.logger.record("train/turns_per_pass", self.turns_per_pass)
        self.logger.record("train/learning_rate", self.policy.optimizer.param_groups[0]["lr"])

    def _choice_targets(self, centre: float, scale: float) -> dict[str, torch.Tensor]:
        """``policy_update="target"``: each observation's target distribution over the listed
        actions (:func:`~gym_llm.rl.ppo.target_update.rollout_targets`)."""
        buffer, finite = self.rollout_buffer, self.rollout_buffer.finite_turns()
        targets, eta, lift = rollout_targets(
            [str(o) for o in buffer.observations_text.reshape(-1)[finite]],
            [int(a[0]) for a in buffer.action_tokens.reshape(-1)[finite]],
            (buffer.advantages.reshape(-1)[finite] - centre) / scale,
            self.rollout_action_probs,
            len(self.policy.actions_list),
            self.kl_step,
        )
        if not targets:
            return {}
        self.logger.record("train/target_eta", eta)
        self.logger.record("train/target_lift_rare", lift)
        stacked = np.stack(list(targets.values()))  # one copy to the device
        on_device = torch.as_tensor(stacked, dtype=torch.float32, device=self.device)
        return dict(zip(targets, on_device, strict=True))

    def _skip_step(self, cause: str, observations: Sequence[str]) -> None:
        """Count a skipped optimizer step, say which batch caused it, and stop the run after
        ``max_consecutive_skips`` in a row."""
        self.skipped_steps += 1
        self._consecutive_skips += 1
        where = self.last_checkpoint if self.last_checkpoint is not None else "none saved yet"
        first = observations[0] if observations else ""
        message = (
            f"Skipped an optimizer step: non-finite {cause} in a batch of {len(observations)} "
            f"turns (first observation: {first[:160]!r}). Skipped {self.skipped_steps} so far, "
            f"{self._consecutive_skips} in a row."
        )
        self.logger.record("train/skipped_cause", message, exclude=("stdout", "csv", "json"))
        if self._consecutive_skips >= self.max_consecutive_skips:
            raise NonFiniteTrainingError(
                f"Training stopped: {self._consecutive_skips} optimizer steps in a row had a "
                f"non-finite {cause}; no step with a non-finite value reached the weights. "
                f"Last checkpoint: {where}. Usual causes: a learning rate too high "
                "(train/learning_rate), an env returning huge rewards (scale them with "
                "reward_scale), fp16 overflow (use bf16 or fp32). Resume from the checkpoint "
                "with a lower learning rate."
            )
        warnings.warn(message, RuntimeWarning, stacklevel=3)

    def _advantage_normalisation(self) -> tuple[float, float]:
        """``(centre, scale)`` for this rollout's advantages: ``(0, 1)`` when not normalising.

        Centred on the rollout's mean and scaled by the std of every advantage seen so far in
        the run, not of this minibatch (SB3, CleanRL) or rollout (TRL): once a task is solved,
        every reward of a rollout can be the same and its advantages are only the critic's
        noise; dividing by *their* tiny std made that noise full-scale and collapsed solved runs
        back onto a wrong answer (KeywordBandit; seeds measured in benchmarks/RESULTS.md).
        """
        advantages = self.rollout_buffer.advantages
        advantages = advantages[np.isfinite(advantages)]  # non-finite turns are left out
        self.nonfinite_turns = int(self.rollout_buffer.advantages.size - advantages.size)
        if not self.normalize_advantage:
            return 0.0, 1.0
        if world_size() == 1:  # float32 mean as always: one-process runs stay bit-identical
            if advantages.size <= 1:
                return 0.0, 1.0
            self.advantage_scale.update(advantages.reshape(-1).astype(np.float64))
            return float(advantages.mean()), float(np.sqrt(self.advantage_scale.var)) + 1e-8
        mean, var, count = global_moments(advantages.reshape(-1))  # over every process
        if count <= 1:
            return 0.0, 1.0
        self.advantage_scale.update_from_moments(
            np.asarray(mean, dtype=np.float64), np.asarray(var, dtype=np.float64), count
        )
        return mean, float(np.sqrt(self.advantage_scale.var)) + 1e-8

    def _update_value_statistics(self) -> float:
        """``value_normalization``: pool this rollout's returns into the value head's running
        statistics (over every process, so that each holds the same head) before any step.
        The head's std: return units per unit of its output, 1 without normalisation."""
        head = cast(ValueHead, self.policy.value_head)
        if head.normalize:
            returns = self.rollout_buffer.returns
            head.update_statistics(global_moments(returns[np.isfinite(returns)].reshape(-1)))
        return head.std

    def _rows_are_shared(self, batch: TextBatch, lockstep: bool) -> bool:
        """Whether turns that share an observation share one row of a pass (choice mode from
        stored states, micro-batches sized by memory)."""
        policy = self.policy
        return (
            self.micro_batch_size is None
            and not lockstep
            and batch.states is not None
            and policy.action_mode == "choice"
            and policy.uses_rollout_states
        )

    def _rows_per_pass(self, observations: Sequence[str], actions: Sequence[np.ndarray]) -> int:
        """Rows per forward/backward pass: as set, or as many as fit the memory budget."""
        if self.micro_batch_size is not None:
            return self.micro_batch_size
        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            budget = free / 4
        else:
            budget = UPDATE_MEMORY_BUDGET_MB * 2**20
        per_turn = self.policy.update_bytes_per_turn(observations, actions)
        return max(1, min(len(observations), int(budget // max(per_turn, 1))))
