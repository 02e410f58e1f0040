"""Rollouts: batched policy calls over the envs' observation strings, into the text buffer.

One policy call per vector step for all envs; truncated episodes bootstrap from the value of their
last observation; the critic-free estimators replace GAE's advantages after the rollout. Part of
:class:`gym_llm.PPO` (its first layer above SB3's ``OnPolicyAlgorithm``).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.vec_env import VecEnv

from gym_llm.policy.llm_policy import LLMPolicy
from gym_llm.rl.common.diagnostics import choice_diagnostics, input_ignored, sampled_diagnostics
from gym_llm.rl.common.distributed import (
    every_process,
    gather_objects,
    global_sums,
    rank,
    world_size,
)
from gym_llm.rl.ppo.advantages import Estimator, critic_free_advantages, dones_from_starts
from gym_llm.rl.ppo.buffer import TextRolloutBuffer


class RolloutCollection(OnPolicyAlgorithm):
    """``collect_rollouts`` for text envs and :class:`LLMPolicy`."""

    policy: LLMPolicy  # type: ignore[assignment]
    rollout_buffer: TextRolloutBuffer
    n_logged_samples: int
    reward_scale: float
    advantage_estimator: Estimator
    #: Share of replies the env could not parse in the last rollout.
    invalid_action_rate: float
    #: Each observation's greedy action when a rollout first saw it (rollout/greedy_changed).
    _first_greedy: dict[str, int]
    #: rollout/input_ignored has warned once in this process (it then only logs).
    _warned_input_ignored: bool
    #: Choice mode: each observation's action probabilities in the last rollout (the policy
    #: the update starts from; ``policy_update="target"`` tilts it).
    rollout_action_probs: dict[str, np.ndarray]
    #: True while a rollout is being collected (a checkpoint then cannot resume exactly).
    _in_rollout: bool

    def collect_rollouts(
        self,
        env: VecEnv,
        callback: BaseCallback,
        rollout_buffer: Any,
        n_rollout_steps: int,
    ) -> bool:
        """Fill the buffer with ``n_rollout_steps`` batched policy calls (one per vector step)."""
        self._in_rollout = True  # a checkpoint taken now cannot resume from _last_obs
        try:
            return self._collect(env, callback, rollout_buffer, n_rollout_steps)
        finally:
            self._in_rollout = False

    def _collect(
        self, env: VecEnv, callback: BaseCallback, rollout_buffer: Any, n_rollout_steps: int
    ) -> bool:
        assert self._last_obs is not None, "No previous observation was provided"
        buffer: TextRolloutBuffer = rollout_buffer
        self.policy.set_training_mode(False)
        buffer.reset()
        callback.on_rollout_start()
        n_steps = invalid = nonfinite = cut_observations = 0
        bonus: float | None = None  # the novelty bonus paid, when the env pays one
        cut_prompts = self.policy.truncated_prompts
        processes = world_size()
        finished: list[dict[str, Any]] = []  # Monitor's records of the episodes that ended
        samples: list[str] = []
        seen: list[str] = []
        probs: list[np.ndarray] = []
        # Generate mode over a fixed list: each valid reply's observation and parsed action.
        listed = self.policy.actions_list if self.policy.action_mode == "generate" else None
        parsed: list[tuple[str, int]] = []
        dones = np.zeros(env.num_envs, dtype=bool)
        while n_steps < n_rollout_steps:
            observations: np.ndarray = self._last_obs  # type: ignore[assignment]
            with torch.inference_mode():
                step = self.policy.act(list(observations))
            if step.action_probs is not None:
                seen.extend(str(o) for o in observations)
                probs.append(step.action_probs)
            new_obs, rewards, dones, infos = env.step(np.array(step.replies, dtype=object))
            self.num_timesteps += env.num_envs * processes  # env steps of every process
            callback.update_locals(locals())
            if not every_process(callback.on_step()):  # all stop together, none waits forever
                return False
            self._update_info_buffer(infos, dones)
            if processes > 1:
                finished.extend(info["episode"] for info in infos if "episode" in info)
            n_steps += 1
            invalid += sum(not info.get("action_valid", True) for info in infos)
            if listed:
                parsed.extend(
                    (str(obs), int(info["action"]))
                    for obs, info in zip(observations, infos, strict=True)
                    if info.get("action_valid", True)
                    and isinstance(info.get("action"), int | np.integer)
                    and not isinstance(info.get("action"), bool)
                )
            paid = [float(info["intrinsic_reward"]) for info in infos if "intrinsic_reward" in info]
            if paid:
                bonus = (bonus or 0.0) + sum(paid)
            cut_observations += sum(bool(info.get("observation_truncated")) for info in infos)
            bad = ~np.isfinite(rewards)
            if bad.any() and not nonfinite:  # once per rollout; the count is logged
                warnings.warn(
                    f"Env {int(np.flatnonzero(bad)[0])} returned a non-finite reward "
                    f"({rewards[bad][0]}) after the reply {step.replies[int(np.flatnonzero(bad)[0])]!r}"
                    ": the turns of that episode are left out of the update "
                    "(train/nonfinite_turns). Fix the env's reward.",
                    RuntimeWarning,
                    stacklevel=2,
                )
            nonfinite += int(bad.sum())
            if len(samples) < self.n_logged_samples:
                samples.append(
                    f"**observation**\n\n    {observations[0]!s}\n\n**reply:** {step.replies[0]}"
                    f"\n\n**reward:** {float(rewards[0]):g}"
                )
            rewards = rewards.astype(np.float32) * self.reward_scale
            for idx, done in enumerate(dones):
                terminal = infos[idx].get("terminal_observation")
                if done and terminal is not None and infos[idx].get("TimeLimit.truncated", False):
                    with torch.inference_mode():
                        terminal_value = self.policy.predict_values([str(terminal)])[0]
                    rewards[idx] += self.gamma * float(terminal_value)
            buffer.add_turns(
                observations,
                step.replies,
                step.actions,
                step.token_log_probs,
                rewards,
                self._last_episode_starts,  # type: ignore[arg-type]
                step.values,
                step.states,
            )
            self._last_obs = new_obs  # type: ignore[assignment]
            self._last_episode_starts = dones
        with torch.inference_mode():
            last_values = self.policy.predict_values(list(self._last_obs))  # type: ignore[arg-type]
        buffer.compute_returns_and_advantage(last_values=last_values.float(), dones=dones)
        if self.advantage_estimator != "gae":
            buffer.advantages = critic_free_advantages(
                self.advantage_estimator,
                buffer.rewards,
                dones_from_starts(buffer.episode_starts, dones),
                buffer.episode_starts,
                buffer.observations_text,
                self.gamma,
            ).astype(np.float32)
        # Episode statistics and counts over every process (the same in each).
        for source, records in enumerate(gather_objects(finished)):
            if source != rank():
                self.ep_info_buffer.extend(records)  # type: ignore[union-attr]
        invalid, nonfinite, cut_observations, cut_prompts = (
            int(n)
            for n in global_sums(
                [invalid, nonfinite, cut_observations, self.policy.truncated_prompts - cut_prompts]
            )
        )
        self.invalid_action_rate = invalid / (n_steps * env.num_envs * processes)
        if probs:
            width = max(p.shape[1] for p in probs)  # per-state action lists differ in length
            all_probs = np.concatenate(
                [np.pad(p, ((0, 0), (0, width - p.shape[1]))) for p in probs]
            )
            self.rollout_action_probs = dict(zip(seen, all_probs, strict=True))
            # Across per-state action lists an index means different actions: no such alarm.
            per_state = getattr(self.policy, "per_state", False)
            figures = choice_diagnostics(seen, all_probs, self._first_greedy)
            figures["input_ignored"] = float(
                not per_state and input_ignored(figures, all_probs.shape[1])
            )
            self._report_diagnostics(figures)
        elif listed and parsed and not getattr(self.policy, "per_state", False):
            texts, actions = zip(*parsed, strict=True)
            n_actions = max(len(listed), max(actions) + 1)
            self._report_diagnostics(sampled_diagnostics(texts, actions, n_actions))
        self.logger.record("rollout/invalid_action_rate", self.invalid_action_rate)
        self.logger.record("rollout/nonfinite_rewards", nonfinite)
        if bonus is not None:  # per env step, in reward units (CountBonusWrapper)
            self.logger.record("rollout/intrinsic_reward", bonus / (n_steps * env.num_envs))
        self.logger.record("rollout/observations_truncated", cut_observations)
        self.logger.record("rollout/prompts_truncated", cut_prompts)
        if samples:
            self.logger.record(
                "rollout/samples",
                "\n\n---\n\n".join(samples),
                exclude=("stdout", "log", "json", "csv"),
            )
        callback.update_locals(locals())
        callback.on_rollout_end()
        return True

    def _report_diagnostics(self, figures: dict[str, float]) -> None:
        """Log a rollout's figures and warn (once per process) when they say ``input_ignored``."""
        for name, value in figures.items():
            self.logger.record(f"rollout/{name}", value)
        if figures["input_ignored"] and not self._warned_input_ignored:
            self._warned_input_ignored = True
            warnings.warn(
                f"At {self.num_timesteps} env steps the policy plays the same near-certain "
                f"action distribution in all {int(figures['distinct_observations'])} "
                "observations of the rollout (mutual information "
                f"{figures['mutual_information']:.4f} nats, per-state entropy "
                f"{figures['state_entropy']:.3f}): it ignores its input. Unless the task's "
                f"best action is the same everywhere, it has collapsed: try {self._remedies()}."
                " Logged as rollout/input_ignored.",
                stacklevel=3,
            )

    def _remedies(self) -> str:
        """What to try against an input-independent policy, leaving out what is already on."""
        policy = self.policy
        choice = policy.action_mode == "choice"
        off = [
            f"policy_kwargs={{'{name}': True}}"
            for name, on in (
                ("action_head", policy.action_head is not None or not policy.actions_list),
                ("choice_calibration", policy.choice_calibration is not None or not choice),
            )
            if not on
        ]
        return ", ".join([*off, "an entropy bonus (ent_coef, or ent_coef='auto')"])
