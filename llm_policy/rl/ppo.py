"""``PPO``: SB3's on-policy algorithm, trained on text turns with token-level log-probs.

Everything SB3 users know keeps working (constructor style, ``learn()``, callbacks, logger and
TensorBoard, ``progress_bar``, ``predict``, ``evaluate_policy``); what differs is what an LLM
needs: rollouts are batched LM calls over strings, the buffer stores token sequences, the loss is
the clipped surrogate per action token with the turn's GAE advantage, gradients are accumulated
over micro-batches, and an optional KL penalty pulls towards the reference model (the same weights
with the LoRA adapter disabled; no second copy in memory).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import is_wrapped
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.type_aliases import GymEnv, Schedule
from stable_baselines3.common.utils import FloatSchedule, explained_variance
from stable_baselines3.common.vec_env import VecEnv

from gym_llm.policy.llm_policy import LLMPolicy
from gym_llm.rl.advantages import check_estimator, critic_free_advantages, dones_from_starts
from gym_llm.rl.buffer import TextRolloutBuffer
from gym_llm.rl.diagnostics import choice_diagnostics
from gym_llm.rl.losses import clipped_surrogate, entropy_bonus, k3_kl, value_loss
from gym_llm.rl.vec_env import TextVecEnv, check_text_env
from gym_llm.spaces import TextActions, TextObservations

SelfPPO = TypeVar("SelfPPO", bound="PPO")

#: Hyper-parameters written to ``config.json`` by ``save`` and passed back by ``load``.
_SAVED_HYPERPARAMETERS = (
    "learning_rate",
    "n_steps",
    "batch_size",
    "n_epochs",
    "gamma",
    "gae_lambda",
    "clip_range_value",
    "normalize_advantage",
    "ent_coef",
    "vf_coef",
    "max_grad_norm",
    "target_kl",
    "kl_coef",
    "micro_batch_size",
    "n_logged_samples",
    "seed",
    "advantage_estimator",
    "clip_range_vf",
    "reward_scale",
    "critic_warmup_steps",
)


#: PPO's learning rate with LoRA when none is given. Measured on SmolLM2-135M with the default
#: LoRA (benchmarks/RESULTS.md, "HighLow"): 1e-4 left a number rule at 0.8-0.9 success after 1,024
#: env steps in 4 seeds out of 4; 5e-4 reached 1.0 by 768 steps in all 4.
LORA_LEARNING_RATE = 5e-4
#: ... and without LoRA (every weight trains; LoRA's rates would wreck a pretrained model).
FULL_FINETUNE_LEARNING_RATE = 1e-5


def default_learning_rate(policy_kwargs: dict[str, Any] | None) -> float:
    """:data:`LORA_LEARNING_RATE`, or :data:`FULL_FINETUNE_LEARNING_RATE` with ``lora=None``."""
    full = (policy_kwargs or {}).get("lora", "default") is None
    return FULL_FINETUNE_LEARNING_RATE if full else LORA_LEARNING_RATE


#: Memory (MB) the update's activations may take on the CPU when ``micro_batch_size=None``.
UPDATE_MEMORY_BUDGET_MB = 1536


def _pad(arrays: list[np.ndarray], width: int, device: torch.device) -> torch.Tensor:
    out = torch.zeros((len(arrays), width), dtype=torch.float32)
    for i, a in enumerate(arrays):
        out[i, : len(a)] = torch.as_tensor(a, dtype=torch.float32)
    return out.to(device)


def regroup_optimizer_state(
    saved: dict[str, Any], optimizer: torch.optim.Optimizer
) -> dict[str, Any]:
    """A saved optimizer state laid out in ``optimizer``'s parameter groups.

    Agents saved before the value head had its own group hold one group whose parameters are, in
    order, the policy's and then the value head's: the order of today's groups, so the state
    carries over index for index.
    """
    groups = optimizer.param_groups
    if len(saved["param_groups"]) == len(groups):
        return saved
    flat = [i for group in saved["param_groups"] for i in group["params"]]
    if len(flat) != sum(len(g["params"]) for g in groups):
        raise ValueError(
            f"The saved optimizer state holds {len(flat)} parameters, this policy trains "
            f"{sum(len(g['params']) for g in groups)}: it was saved with other trainable layers "
            "or LoRA settings."
        )
    template = {k: v for k, v in saved["param_groups"][0].items() if k != "params"}
    regrouped, start = [], 0
    for group in groups:
        count = len(group["params"])
        regrouped.append(
            {
                **template,
                "lr_scale": group.get("lr_scale", 1.0),
                "params": flat[start : start + count],
            }
        )
        start += count
    return {"state": saved["state"], "param_groups": regrouped}


class PPO(OnPolicyAlgorithm):
    """Proximal Policy Optimization for :class:`LLMPolicy` on text envs.

    SB3's PPO arguments keep their meaning; the LLM-specific ones:

    Args:
        learning_rate: ``None`` (default): 5e-4 with LoRA, 1e-5 for full fine-tuning
            (:func:`default_learning_rate`, measured); a float or an SB3 schedule otherwise.
        kl_coef: weight of the KL penalty to the reference model (adapter disabled); 0 = off.
        micro_batch_size: turns per forward/backward pass; gradients are accumulated over the
            minibatch (``batch_size``), so memory scales with this, not with ``batch_size``.
            ``None`` (default): as many turns as fit the update's memory budget
            (:data:`UPDATE_MEMORY_BUDGET_MB` on the CPU, a quarter of the free memory on a
            GPU), estimated by :meth:`LLMPolicy.update_bytes_per_turn` for each minibatch. Fewer,
            larger passes are faster, and the shared prompt prefix is encoded once per pass.
        n_logged_samples: (prompt, reply, reward) examples written to TensorBoard per rollout.
        advantage_estimator: ``"gae"`` (turn-level GAE with the critic, default) or a critic-free
            one: ``"rebn"``, ``"grpo"``, ``"rloo"``, ``"gigpo"`` (see :mod:`gym_llm.rl.advantages`).
            The critic is still trained (``vf_coef``) and its explained variance logged.
        clip_range_vf: clip the value loss around the rollout's values (PPO2, SB3's
            ``clip_range_vf``); ``None`` = no clipping. In units of (scaled) return.
        reward_scale: every reward is multiplied by this before advantages and returns (GLAM
            used 20 for sparse 0/1 rewards; returns in the hundreds want < 1). Logged episode
            returns stay unscaled.
        critic_warmup_steps: for the first this many env steps only the value head trains (the
            policy's weights get no update), so the first policy updates see a critic that
            already predicts something (TWOSOME warms its critic up for 5k steps).
    """

    policy_aliases: ClassVar[dict[str, type[Any]]] = {"LLMPolicy": LLMPolicy}
    policy: LLMPolicy  # type: ignore[assignment]
    rollout_buffer: TextRolloutBuffer

    def __init__(
        self,
        policy: str | type[LLMPolicy],
        env: GymEnv | str | None,
        learning_rate: float | Schedule | None = None,
        n_steps: int = 64,
        batch_size: int = 64,
        n_epochs: int = 2,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        clip_range: float = 0.2,
        normalize_advantage: bool = True,
        ent_coef: float = 0.0,
        vf_coef: float = 0.5,
        max_grad_norm: float = 1.0,
        target_kl: float | None = None,
        kl_coef: float = 0.0,
        micro_batch_size: int | None = None,
        n_logged_samples: int = 4,
        advantage_estimator: str = "gae",
        clip_range_vf: float | None = None,
        reward_scale: float = 1.0,
        critic_warmup_steps: int = 0,
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        policy_kwargs: dict[str, Any] | None = None,
        verbose: int = 0,
        seed: int | None = None,
        device: torch.device | str = "auto",
        _init_setup_model: bool = True,
    ) -> None:
        if learning_rate is None:
            learning_rate = default_learning_rate(policy_kwargs)
        super().__init__(
            policy,  # type: ignore[arg-type]
            env,  # type: ignore[arg-type]
            learning_rate=learning_rate,
            n_steps=n_steps,
            gamma=gamma,
            gae_lambda=gae_lambda,
            ent_coef=ent_coef,
            vf_coef=vf_coef,
            max_grad_norm=max_grad_norm,
            use_sde=False,
            sde_sample_freq=-1,
            stats_window_size=stats_window_size,
            tensorboard_log=tensorboard_log,
            policy_kwargs=policy_kwargs,
            verbose=verbose,
            seed=seed,
            device=device,
            _init_setup_model=False,
        )
        for name, value in (
            ("batch_size", batch_size),
            ("n_epochs", n_epochs),
            ("n_steps", n_steps),
        ):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}.")
        if micro_batch_size is not None and micro_batch_size < 1:
            raise ValueError(
                f"micro_batch_size must be >= 1 (or None: chosen by memory), got {micro_batch_size}."
            )
        if clip_range_vf is not None and clip_range_vf <= 0:
            raise ValueError(
                f"clip_range_vf must be > 0 (or None: no clipping), got {clip_range_vf}."
            )
        if critic_warmup_steps < 0:
            raise ValueError(f"critic_warmup_steps must be >= 0, got {critic_warmup_steps}.")
        self.advantage_estimator = check_estimator(advantage_estimator)
        self.clip_range_vf = clip_range_vf
        self.reward_scale = float(reward_scale)
        self.critic_warmup_steps = critic_warmup_steps
        self.batch_size = batch_size
        self.n_epochs = n_epochs
        self.clip_range_value = float(clip_range)
        self.clip_range: Schedule = FloatSchedule(float(clip_range))
        self.normalize_advantage = normalize_advantage
        self.target_kl = target_kl
        self.kl_coef = kl_coef
        self.micro_batch_size = micro_batch_size
        self.n_logged_samples = n_logged_samples
        #: max |ratio - 1| on the first minibatch of the last update (invariant: ~0).
        self.first_ratio_error = float("nan")
        #: Share of replies the env could not parse in the last rollout.
        self.invalid_action_rate = float("nan")
        #: Mean turns per forward/backward pass in the last update (micro_batch_size or auto).
        self.turns_per_pass = float("nan")
        #: Running std of every advantage so far: the scale of normalize_advantage.
        self.advantage_scale = RunningMeanStd()
        self._shuffle_rng = np.random.default_rng(seed)
        #: Each observation's greedy action when a rollout first saw it (rollout/greedy_changed).
        self._first_greedy: dict[str, int] = {}
        if _init_setup_model:
            self._setup_model()

    # --- set-up --------------------------------------------------------------------------------

    @classmethod
    def from_spaces(
        cls: type[SelfPPO],
        observation_space: TextObservations,
        action_space: TextActions,
        *,
        n_envs: int = 1,
        **kwargs: Any,
    ) -> SelfPPO:
        """An agent built from its spaces instead of an env (SB3 reads them off the env).

        For callers that step envs themselves (``Agent``) or have none yet (``PPO.load`` of an
        agent to query); ``kwargs`` are the constructor's. Training with :meth:`learn` needs an
        env first (:meth:`set_env`, whose env count must be ``n_envs``).
        """
        model = cls(LLMPolicy, None, _init_setup_model=False, **kwargs)
        model.observation_space, model.action_space = observation_space, action_space
        model.n_envs = n_envs
        model._setup_model()
        return model

    def _update_learning_rate(
        self, optimizers: torch.optim.Optimizer | list[torch.optim.Optimizer]
    ) -> None:
        """SB3's schedule, times each parameter group's ``lr_scale`` (the value head's own rate)."""
        lr = self.lr_schedule(self._current_progress_remaining)
        self.logger.record("train/learning_rate", lr)
        for optimizer in optimizers if isinstance(optimizers, list) else [optimizers]:
            for group in optimizer.param_groups:
                group["lr"] = lr * group.get("lr_scale", 1.0)

    @staticmethod
    def _wrap_env(env: GymEnv, verbose: int = 0, monitor_wrapper: bool = True) -> VecEnv:
        if isinstance(env, VecEnv):
            check_text_env(env)
            return env
        check_text_env(env)
        wrapped: gym.Env[Any, Any] = env
        if monitor_wrapper and not is_wrapped(env, Monitor):
            wrapped = Monitor(env)
        return TextVecEnv([lambda: wrapped])

    def _setup_model(self) -> None:
        self._setup_lr_schedule()
        self.set_random_seed(self.seed)
        self.policy = LLMPolicy(
            self.observation_space,
            self.action_space,
            self.lr_schedule,
            device=self.device,
            **self.policy_kwargs,
        )
        self.rollout_buffer = TextRolloutBuffer(
            self.n_steps,
            self.n_envs,
            device=self.device,
            gae_lambda=self.gae_lambda,
            gamma=self.gamma,
        )

    def predict(  # type: ignore[override]
        self,
        observation: str | Sequence[str] | np.ndarray,
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
    ) -> tuple[Any, tuple[np.ndarray, ...] | None]:
        """Replies for one observation string (returns a ``str``) or a batch (an object array)."""
        return self.policy.predict(observation, state, episode_start, deterministic)

    # --- rollouts ------------------------------------------------------------------------------

    def collect_rollouts(
        self,
        env: VecEnv,
        callback: BaseCallback,
        rollout_buffer: Any,
        n_rollout_steps: int,
    ) -> bool:
        """Fill the buffer with ``n_rollout_steps`` batched policy calls (one per vector step)."""
        assert self._last_obs is not None, "No previous observation was provided"
        buffer: TextRolloutBuffer = rollout_buffer
        self.policy.set_training_mode(False)
        buffer.reset()
        callback.on_rollout_start()
        n_steps = invalid = 0
        samples: list[str] = []
        seen: list[str] = []
        probs: list[np.ndarray] = []
        dones = np.zeros(env.num_envs, dtype=bool)
        while n_steps < n_rollout_steps:
            observations: np.ndarray = self._last_obs  # type: ignore[assignment]
            with torch.inference_mode():
                step = self.policy.act(list(observations))
            if step.action_probs is not None:
                seen.extend(str(o) for o in observations)
                probs.append(step.action_probs)
            new_obs, rewards, dones, infos = env.step(np.array(step.replies, dtype=object))
            self.num_timesteps += env.num_envs
            callback.update_locals(locals())
            if not callback.on_step():
                return False
            self._update_info_buffer(infos, dones)
            n_steps += 1
            invalid += sum(not info.get("action_valid", True) for info in infos)
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
        self.invalid_action_rate = invalid / (n_steps * env.num_envs)
        if probs:
            figures = choice_diagnostics(seen, np.concatenate(probs), self._first_greedy)
            for name, value in figures.items():
                self.logger.record(f"rollout/{name}", value)
        self.logger.record("rollout/invalid_action_rate", self.invalid_action_rate)
        if samples:
            self.logger.record(
                "rollout/samples",
                "\n\n---\n\n".join(samples),
                exclude=("stdout", "log", "json", "csv"),
            )
        callback.update_locals(locals())
        callback.on_rollout_end()
        return True

    # --- the update ----------------------------------------------------------------------------

    def train(self) -> None:
        """Clipped-surrogate PPO over ``n_epochs`` of shuffled minibatches of turns."""
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        clip = self.clip_range(self._current_progress_remaining)
        stats: dict[str, list[float]] = {
            k: []
            for k in (
                "pg",
                "value",
                "entropy",
                "kl_ref",
                "approx_kl",
                "clip_fraction",
                "rows_per_pass",
            )
        }
        continue_training, first, first_error = True, True, 0.0
        epoch = 0
        centre, scale = self._advantage_normalisation()
        warmup = self.num_timesteps <= self.critic_warmup_steps
        value_ids = {id(p) for p in self.policy.value_head.parameters()}
        frozen_now = (  # during the critic's warm-up the policy's weights wait
            [p for p in self.policy.parameters() if p.requires_grad and id(p) not in value_ids]
            if warmup
            else []
        )
        for epoch in range(self.n_epochs):
            for batch in self.rollout_buffer.minibatches(self.batch_size, self._shuffle_rng):
                advantages = (batch.advantages - centre) / scale
                self.policy.optimizer.zero_grad(set_to_none=True)
                n = len(batch.observations)
                batch_kl: list[float] = []
                rows = self._rows_per_pass(batch.observations, batch.actions)
                stats["rows_per_pass"].append(float(rows))
                for start in range(0, n, rows):
                    part = slice(start, start + rows)
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
                    critic = value_loss(
                        ev.values, batch.returns[part], batch.old_values[part], self.clip_range_vf
                    )
                    entropy = entropy_bonus(ev.entropy)
                    loss = surrogate.loss + self.ent_coef * entropy + self.vf_coef * critic
                    if self.kl_coef > 0:
                        ref = self.policy.reference_log_probs(observations, actions, states)
                        kl_ref = k3_kl(ev.token_log_probs, ref, mask)
                        loss = loss + self.kl_coef * kl_ref
                        stats["kl_ref"].append(kl_ref.item())
                    (loss * (len(observations) / n)).backward()
                    if first:
                        first_error = max(first_error, surrogate.max_ratio_error)
                    batch_kl.append(surrogate.approx_kl)
                    stats["pg"].append(surrogate.loss.item())
                    stats["value"].append(critic.item())
                    stats["entropy"].append(entropy.item())
                    stats["approx_kl"].append(surrogate.approx_kl)
                    stats["clip_fraction"].append(surrogate.clip_fraction)
                if first:
                    self.first_ratio_error, first = first_error, False
                if self.target_kl is not None and float(np.mean(batch_kl)) > 1.5 * self.target_kl:
                    continue_training = False
                    if self.verbose >= 1:
                        print(
                            f"Early stopping at epoch {epoch} (approx_kl {np.mean(batch_kl):.4f})"
                        )
                    break
                for param in frozen_now:
                    param.grad = None
                torch.nn.utils.clip_grad_norm_(
                    [p for p in self.policy.parameters() if p.requires_grad], self.max_grad_norm
                )
                self.policy.optimizer.step()
                self._n_updates += 1
            if not continue_training:
                break
        self.policy.set_training_mode(False)
        values = self.rollout_buffer.values.flatten()
        returns = self.rollout_buffer.returns.flatten()
        self.logger.record("train/policy_gradient_loss", float(np.mean(stats["pg"])))
        self.logger.record("train/value_loss", float(np.mean(stats["value"])))
        self.logger.record("train/entropy_loss", float(np.mean(stats["entropy"])))
        self.logger.record("train/approx_kl", float(np.mean(stats["approx_kl"])))
        self.logger.record("train/clip_fraction", float(np.mean(stats["clip_fraction"])))
        if stats["kl_ref"]:
            self.logger.record("train/kl_ref", float(np.mean(stats["kl_ref"])))
        self.logger.record("train/explained_variance", float(explained_variance(values, returns)))
        self.logger.record("train/first_ratio_error", self.first_ratio_error)
        self.logger.record("train/early_stopped", int(not continue_training))
        self.logger.record("train/epochs", epoch + 1)
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/clip_range", clip)
        self.logger.record("train/critic_warmup", int(warmup))
        self.turns_per_pass = float(np.mean(stats["rows_per_pass"]))
        self.logger.record("train/turns_per_pass", self.turns_per_pass)
        self.logger.record("train/learning_rate", self.policy.optimizer.param_groups[0]["lr"])

    def _advantage_normalisation(self) -> tuple[float, float]:
        """``(centre, scale)`` for this rollout's advantages: ``(0, 1)`` when not normalising.

        Centred on the rollout's mean and scaled by the std of every advantage seen so far in
        the run, not of this minibatch (SB3, CleanRL) or rollout (TRL): once a task is solved,
        every reward of a rollout can be the same and its advantages are only the critic's
        noise; dividing by *their* tiny std made that noise full-scale and collapsed solved runs
        back onto a wrong answer (KeywordBandit; seeds measured in benchmarks/RESULTS.md).
        """
        advantages = self.rollout_buffer.advantages
        if not self.normalize_advantage or advantages.size <= 1:
            return 0.0, 1.0
        self.advantage_scale.update(advantages.reshape(-1).astype(np.float64))
        return float(advantages.mean()), float(np.sqrt(self.advantage_scale.var)) + 1e-8

    def _rows_per_pass(self, observations: Sequence[str], actions: Sequence[np.ndarray]) -> int:
        """The micro-batch size: as set, or as many turns as fit the memory budget."""
        if self.micro_batch_size is not None:
            return self.micro_batch_size
        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            budget = free / 4
        else:
            budget = UPDATE_MEMORY_BUDGET_MB * 2**20
        per_turn = self.policy.update_bytes_per_turn(observations, actions)
        return max(1, min(len(observations), int(budget // max(per_turn, 1))))

    def learn(
        self: SelfPPO,
        total_timesteps: int,
        callback: Any = None,
        log_interval: int = 1,
        tb_log_name: str = "PPO",
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
    ) -> SelfPPO:
        return super().learn(
            total_timesteps=total_timesteps,
            callback=callback,
            log_interval=log_interval,
            tb_log_name=tb_log_name,
            reset_num_timesteps=reset_num_timesteps,
            progress_bar=progress_bar,
        )

    # --- save / load ---------------------------------------------------------------------------

    def _config(self) -> dict[str, Any]:
        obs_space, act_space = self.observation_space, self.action_space
        policy_kwargs = {
            k: v for k, v in self.policy_kwargs.items() if k not in ("lora", "tokenizer")
        }
        if not isinstance(policy_kwargs.get("model", ""), str):
            # Built from a model object: record where it came from, so load() can rebuild it.
            if not self.policy.model_name:
                raise ValueError(
                    "This agent's policy was built from a model object with no name_or_path, so "
                    "a saved agent could not be rebuilt. Save the model first with "
                    "model.save_pretrained(DIR) and tokenizer.save_pretrained(DIR), then build "
                    "the agent with model=DIR."
                )
            policy_kwargs["model"] = self.policy.model_name
        # The settings in effect (the default LoRA included), so a later change of a default
        # cannot change what a saved agent rebuilds.
        policy_kwargs["lora"] = self.policy.lora_settings
        # The effective value, so a later change of the default cannot change a saved agent.
        policy_kwargs["trainable_layers"] = self.policy.trainable_layers
        return {
            "format": "gym_llm.PPO/1",
            "hyperparameters": {
                k: getattr(self, k)
                for k in _SAVED_HYPERPARAMETERS
                if not callable(getattr(self, k))
            },
            "policy_kwargs": policy_kwargs,
            "num_timesteps": self.num_timesteps,
            "n_updates": self._n_updates,
            "observation_space": {
                "max_length": obs_space.max_length,  # type: ignore[attr-defined]
                "instruction": getattr(obs_space, "instruction", None),
            },
            "action_space": {
                "actions": list(act_space.actions) if getattr(act_space, "actions", None) else None,  # type: ignore[attr-defined]
                "description": getattr(act_space, "description", None),
                "max_length": act_space.max_length,  # type: ignore[attr-defined]
            },
        }

    def save(self, path: str | os.PathLike[str], exclude: Any = None, include: Any = None) -> None:  # type: ignore[override]
        """Write a directory: ``config.json`` + ``policy.pt`` (adapter, value head, optimizer).

        Never the base weights, never a pickled model or tokenizer. The directory is written next
        to ``path`` and renamed into place, so a failed save leaves the previous checkpoint intact.
        """
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        try:
            (tmp / "config.json").write_text(json.dumps(self._config(), indent=2, default=str))
            torch.save(
                {
                    "trainable": self.policy.trainable_state_dict(),
                    "optimizer": self.policy.optimizer.state_dict(),
                    "advantage_scale": torch.tensor(
                        [
                            float(self.advantage_scale.mean),
                            float(self.advantage_scale.var),
                            float(self.advantage_scale.count),
                        ],
                        dtype=torch.float64,
                    ),
                    **(
                        {"choice_calibration": self.policy.choice_calibration.cpu()}
                        if self.policy.choice_calibration is not None
                        else {}
                    ),
                },
                tmp / "policy.pt",
            )
            backup = target.with_name(f".{target.name}.old")
            if target.exists():
                os.replace(target, backup)
            os.replace(tmp, target)
            shutil.rmtree(backup, ignore_errors=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    @classmethod
    def load(  # type: ignore[override]
        cls: type[SelfPPO],
        path: str | os.PathLike[str],
        env: GymEnv | None = None,
        device: torch.device | str = "auto",
        **kwargs: Any,
    ) -> SelfPPO:
        """Rebuild an agent saved by :meth:`save`; ``env`` is optional (needed to keep training)."""
        directory = Path(path)
        config_file = directory / "config.json"
        if not config_file.is_file():
            raise FileNotFoundError(
                f"{directory} is not a gym_llm agent directory (no config.json); save one with "
                "model.save(path)."
            )
        config = json.loads(config_file.read_text())
        hyper = dict(config["hyperparameters"])
        hyper["clip_range"] = hyper.pop("clip_range_value")
        hyper.update(kwargs)
        # Agents saved before trainable_layers existed trained every layer.
        policy_kwargs = {"trainable_layers": None, **config["policy_kwargs"]}
        saved_actions = config["action_space"]["actions"]
        if env is None:
            model = cls.from_spaces(
                TextObservations(
                    config["observation_space"]["max_length"],
                    instruction=config["observation_space"]["instruction"],
                ),
                TextActions(
                    saved_actions,
                    description=config["action_space"]["description"],
                    max_length=config["action_space"]["max_length"],
                ),
                policy_kwargs=policy_kwargs,
                device=device,
                **hyper,
            )
        else:
            check_text_env(env)  # a raw env gets the wrapping advice, not an action mismatch
            actions = getattr(env.action_space, "actions", None)
            if saved_actions != (list(actions or []) or None):
                raise ValueError(
                    f"The env's actions {actions} differ from the saved agent's {saved_actions}."
                )
            model = cls(LLMPolicy, env, policy_kwargs=policy_kwargs, device=device, **hyper)
        model.load_policy_state(directory)
        return model

    def load_policy_state(self, path: str | os.PathLike[str]) -> None:
        """Load the trained state a :meth:`save` directory holds (adapter, value head, optimizer,
        counters) into this already-built agent; shared by :meth:`load` and ``Agent.load``."""
        directory = Path(path)
        config = json.loads((directory / "config.json").read_text())
        state = torch.load(directory / "policy.pt", map_location=self.device, weights_only=True)
        self.policy.load_trainable_state_dict(state["trainable"])
        self.policy.optimizer.load_state_dict(
            regroup_optimizer_state(state["optimizer"], self.policy.optimizer)
        )
        if "choice_calibration" in state:  # exactly the constants the agent trained with
            self.policy.choice_calibration = state["choice_calibration"].to(self.device)
        if "advantage_scale" in state:  # agents saved before it existed start a fresh one
            mean, var, count = state["advantage_scale"].tolist()
            self.advantage_scale.mean = np.asarray(mean, dtype=np.float64)
            self.advantage_scale.var = np.asarray(var, dtype=np.float64)
            self.advantage_scale.count = count
        self.num_timesteps = int(config["num_timesteps"])
        self._n_updates = int(config["n_updates"])
