"""Where PPO's advantages come from, and at what scale.

After each rollout the buffer holds GAE's advantages; a critic-free estimator
(:mod:`gym_llm.rl.ppo.advantages`) or the action values of the run's replay
(:class:`~gym_llm.rl.ppo.q_critic.QCritic`) replace them. ``normalize_advantage`` centres them on
the rollout's mean and scales them by the running std of every advantage so far, and the target
update reads each state's target distribution over the listed actions from them. One part owns all
of this so that the algorithm only asks for advantages, whichever estimator made them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.running_mean_std import RunningMeanStd

from gym_llm.policy.outputs import PolicyStep
from gym_llm.rl.common.distributed import global_moments, world_size
from gym_llm.rl.ppo.advantages import (
    CRITIC_FREE,
    Estimator,
    critic_free_advantages,
    dones_from_starts,
)
from gym_llm.rl.ppo.buffer import TextRolloutBuffer
from gym_llm.rl.ppo.q_critic import QCritic
from gym_llm.rl.ppo.target_update import rollout_targets, rows_on_device, table_targets


class AdvantageSource:
    """A run's advantages: the estimator that replaces GAE's (``q_critic`` with ``"q"``), and
    the running scale they are normalised by."""

    def __init__(self, estimator: Estimator, q_critic: QCritic | None) -> None:
        #: The resolved ``advantage_estimator`` (``"auto"`` already decided).
        self.estimator = estimator
        #: ``advantage_estimator="q"``: the action values the advantages are read from.
        self.q_critic = q_critic
        #: Running std of every advantage so far: the scale of ``normalize_advantage``.
        self.scale = RunningMeanStd()
        #: Turns of the last rollout left out of the update for a non-finite advantage.
        self.nonfinite_turns = 0

    def add_turns(
        self,
        observations: Any,
        step: PolicyStep,
        new_obs: Any,
        rewards: np.ndarray,
        dones: np.ndarray,
        infos: list[dict[str, Any]],
    ) -> None:
        """One vector step's turns, for the action values' replay (nothing without them)."""
        if self.q_critic is not None:
            self.q_critic.add_turns(observations, step, new_obs, rewards, dones, infos)

    def after_rollout(
        self,
        buffer: TextRolloutBuffer,
        dones: np.ndarray,
        steps: int,
        num_timesteps: int,
        gamma: float,
        logger: Logger,
    ) -> None:
        """Replace GAE's advantages in ``buffer`` (``steps`` vector steps, the last ``dones``):
        the action values are trained on the replay first, this rollout included."""
        if self.q_critic is not None:
            figures = self.q_critic.train(num_timesteps, steps * buffer.n_envs)
            for name, value in figures.items():
                logger.record(f"train/{name}", value)
            buffer.advantages = self.q_critic.rollout_advantages(steps).astype(np.float32)
        elif self.estimator in CRITIC_FREE:
            buffer.advantages = critic_free_advantages(
                self.estimator,
                buffer.rewards,
                dones_from_starts(buffer.episode_starts, dones),
                buffer.episode_starts,
                buffer.observations_text,
                gamma,
            ).astype(np.float32)

    def normalisation(self, buffer: TextRolloutBuffer, normalize: bool) -> tuple[float, float]:
        """``(centre, scale)`` for the rollout's advantages: ``(0, 1)`` when not normalising.

        Centred on the rollout's mean and scaled by the std of every advantage seen so far in
        the run, not of this minibatch (SB3, CleanRL) or rollout (TRL): once a task is solved,
        every reward of a rollout can be the same and its advantages are only the critic's
        noise; dividing by *their* tiny std made that noise full-scale and collapsed solved runs
        back onto a wrong answer (KeywordBandit; seeds measured in benchmarks/RESULTS.md).
        """
        advantages = buffer.advantages[np.isfinite(buffer.advantages)]  # non-finite: left out
        self.nonfinite_turns = int(buffer.advantages.size - advantages.size)
        if not normalize:
            return 0.0, 1.0
        if world_size() == 1:  # float32 mean as always: one-process runs stay bit-identical
            if advantages.size <= 1:
                return 0.0, 1.0
            self.scale.update(advantages.reshape(-1).astype(np.float64))
            return float(advantages.mean()), float(np.sqrt(self.scale.var)) + 1e-8
        mean, var, count = global_moments(advantages.reshape(-1))  # over every process
        if count <= 1:
            return 0.0, 1.0
        self.scale.update_from_moments(
            np.asarray(mean, dtype=np.float64), np.asarray(var, dtype=np.float64), count
        )
        return mean, float(np.sqrt(self.scale.var)) + 1e-8

    def choice_targets(
        self,
        buffer: TextRolloutBuffer,
        centre: float,
        scale: float,
        action_probs: dict[str, np.ndarray],
        n_actions: int,
        kl_step: float,
        device: torch.device,
        logger: Logger,
    ) -> dict[str, torch.Tensor]:
        """``policy_update="target"``: each observation's target distribution over the listed
        actions, from every action's value where there are action values, else from the
        rollout's played actions (:mod:`gym_llm.rl.ppo.target_update`)."""
        finite = buffer.finite_turns()
        observations = [str(o) for o in buffer.observations_text.reshape(-1)[finite]]
        if self.q_critic is not None:  # every action's advantage, played or not
            states, table, visits = self.q_critic.state_table(observations, action_probs)
            targets, eta, lift = table_targets(states, table / scale, visits, action_probs, kl_step)
        else:
            targets, eta, lift = rollout_targets(
                observations,
                [int(a[0]) for a in buffer.action_tokens.reshape(-1)[finite]],
                (buffer.advantages.reshape(-1)[finite] - centre) / scale,
                action_probs,
                n_actions,
                kl_step,
            )
        if not targets:
            return {}
        logger.record("train/target_eta", eta)
        logger.record("train/target_lift_rare", lift)
        return rows_on_device(targets, device)
