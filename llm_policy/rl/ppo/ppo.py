"""``PPO``: SB3's on-policy algorithm, trained on text turns with token-level log-probs.

Everything SB3 users know keeps working (constructor style, ``learn()``, callbacks, logger and
TensorBoard, ``progress_bar``, ``predict``, ``evaluate_policy``); what differs is what an LLM
needs: rollouts are batched LM calls over strings, the buffer stores token sequences, the loss is
the clipped surrogate per action token with the turn's GAE advantage (:func:`~gym_llm.rl.ppo.loss.ppo_loss`),
gradients are accumulated over micro-batches, and an optional KL penalty pulls towards the
reference model (the same weights with the LoRA adapter disabled; no second copy in memory).

Laid out as SB3's ``PPO``: ``collect_rollouts`` and ``train`` here; the parts it owns are the
rollout's counts and diagnostics (:class:`~gym_llm.rl.ppo.rollout.RolloutMonitor`), the
update's passes over each minibatch (:class:`~gym_llm.rl.ppo.passes.UpdatePasses`), where its
advantages come from (:class:`~gym_llm.rl.ppo.advantage_source.AdvantageSource`), the NaN
guard (:class:`~gym_llm.rl.ppo.guard.NanGuard`) and data parallelism
(:class:`~gym_llm.rl.ppo.data_parallel.DataParallel`); the saved format is
:mod:`gym_llm.rl.common.checkpoint` (PPO's tensors in it: :mod:`gym_llm.rl.ppo.saving`), the
run's random state :mod:`gym_llm.rl.common.run_state`.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.type_aliases import GymEnv, Schedule
from stable_baselines3.common.utils import FloatSchedule
from stable_baselines3.common.vec_env import VecEnv
from torch.nn.utils import get_total_norm

from gym_llm.configs import ConfigField, with_settings
from gym_llm.policy.llm_policy import LLMPolicy
from gym_llm.rl.common.base_model import base_model_writer
from gym_llm.rl.common.checkpoint import (
    SAVED_HYPERPARAMETERS,
    TRAINING_STATE,
    SavedConfig,
)
from gym_llm.rl.common.checkpoint_files import (
    agent_path,
    write_agent_directory,
)
from gym_llm.rl.common.distributed import (
    any_process,
    average_gradients,
    every_process,
    from_main_process,
    gather_objects,
    global_mean,
    global_moments,
    init_from_launcher,
    rank,
    same_in_every_process,
    world_size,
)
from gym_llm.rl.common.learn_logger import learn_logging
from gym_llm.rl.common.run_state import (
    algorithm_state,
    generator_from_state,
    restore_global_rng_state,
    resume_envs,
)
from gym_llm.rl.common.sharding import (
    clip_grad_norm,
    is_sharded,
    refresh,
    sharded_update,
)
from gym_llm.rl.common.vec_env import check_text_env, wrap_text_env
from gym_llm.rl.ppo.advantage_source import AdvantageSource
from gym_llm.rl.ppo.advantages import Estimator
from gym_llm.rl.ppo.behaviour import (
    check_behaviour_floor,
    check_floor_balance,
    explore,
    rare_first,
    resolve_floor_mode,
)
from gym_llm.rl.ppo.buffer import TextRolloutBuffer
from gym_llm.rl.ppo.config import (
    PPOConfig,
    default_learning_rate,
    resolve_auto,
    resolve_floor,
)
from gym_llm.rl.ppo.data_parallel import DataParallel
from gym_llm.rl.ppo.entropy_control import (
    check_listed_actions,
    marginal_entropy,
    next_ent_coef,
    parse_ent_coef,
)
from gym_llm.rl.ppo.guard import NanGuard
from gym_llm.rl.ppo.loss import LossSettings
from gym_llm.rl.ppo.passes import UpdatePasses
from gym_llm.rl.ppo.q_critic import Q_DEFAULTS, QCritic, q_unavailable
from gym_llm.rl.ppo.rollout import RolloutMonitor, collapse_remedies
from gym_llm.rl.ppo.saving import agent_tensors, load_trained_state
from gym_llm.rl.ppo.target_update import rows_on_device
from gym_llm.rl.ppo.update_log import UpdateState, record_update
from gym_llm.spaces import TextActions, TextObservations

SelfPPO = TypeVar("SelfPPO", bound="PPO")


class PPO(OnPolicyAlgorithm):
    """Proximal Policy Optimization for :class:`LLMPolicy` on text envs.

    ``PPO(policy, env, config=None, **settings)``: the settings are :class:`PPOConfig`'s fields
    (SB3's PPO arguments keep their meaning), given as a config, as keyword arguments replacing
    its fields, or both; SB3's own arguments (``stats_window_size``, ``tensorboard_log``,
    ``policy_kwargs`` (:class:`LLMPolicy`'s: ``model``, ``lora``, ...), ``verbose``, ``seed``,
    ``device``, ``_init_setup_model``) are keyword arguments as in SB3. ``model.n_epochs`` and the
    other settings read and write ``model.config``, which ``save`` records.

    Started by ``torchrun`` or ``accelerate launch`` with several processes, the same script
    trains data-parallel: each process steps its own envs (seeded ``seed + rank * n_envs``),
    gradients are averaged over the processes every optimizer step, ``total_timesteps`` counts
    the env steps of all of them, and only the main process writes TensorBoard, the progress bar
    and ``save`` (see :mod:`gym_llm.rl.common.distributed`).
    """

    policy_aliases: ClassVar[dict[str, type[Any]]] = {"LLMPolicy": LLMPolicy}
    policy: LLMPolicy  # type: ignore[assignment]
    rollout_buffer: TextRolloutBuffer

    batch_size: ConfigField[int] = ConfigField()
    n_epochs: ConfigField[int] = ConfigField()
    n_steps: ConfigField[int] = ConfigField()
    gamma: ConfigField[float] = ConfigField()
    gae_lambda: ConfigField[float] = ConfigField()
    normalize_advantage: ConfigField[bool] = ConfigField()
    target_entropy: ConfigField[float | None] = ConfigField()
    target_entropy_of: ConfigField[str] = ConfigField()
    min_action_prob: ConfigField[float] = ConfigField()
    floor_mode: ConfigField[str] = ConfigField()
    floor_balance: ConfigField[float] = ConfigField()
    policy_update: ConfigField[str] = ConfigField()
    kl_step: ConfigField[float] = ConfigField()
    vf_coef: ConfigField[float] = ConfigField()
    max_grad_norm: ConfigField[float] = ConfigField()
    target_kl: ConfigField[float | None] = ConfigField()
    kl_coef: ConfigField[float] = ConfigField()
    micro_batch_size: ConfigField[int | None] = ConfigField()
    advantage_estimator: ConfigField[Estimator] = ConfigField()
    q_n_steps: ConfigField[int] = ConfigField()
    q_cut: ConfigField[float] = ConfigField()
    q_replay_ratio: ConfigField[float] = ConfigField()
    q_replay_balance: ConfigField[float] = ConfigField()
    q_fit: ConfigField[str] = ConfigField()
    q_gamma: ConfigField[float] = ConfigField()
    q_huber_delta: ConfigField[float] = ConfigField()
    clip_range_vf: ConfigField[float | None] = ConfigField()
    reward_scale: ConfigField[float] = ConfigField()
    critic_warmup_steps: ConfigField[int] = ConfigField()

    def __init__(
        self,
        policy: str | type[LLMPolicy],
        env: GymEnv | str | None,
        config: PPOConfig | None = None,
        *,
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        policy_kwargs: dict[str, Any] | None = None,
        verbose: int = 0,
        seed: int | None = None,
        device: torch.device | str = "auto",
        _init_setup_model: bool = True,
        **settings: Any,
    ) -> None:
        config = with_settings(PPOConfig, config, settings, "PPO")
        if config.learning_rate is None:
            config.learning_rate = default_learning_rate(policy_kwargs)
        #: Every setting, as ``save`` records it (``model.n_epochs`` is ``model.config.n_epochs``).
        self.config = config
        # Under torchrun / accelerate launch: join the job (and pick this process's GPU) before
        # the device is resolved and the model built. A no-op in one process.
        init_from_launcher()
        #: Several processes (torchrun, accelerate launch): seeds, equal weights, FSDP.
        self.parallel = DataParallel(config.fsdp)
        super().__init__(
            policy,  # type: ignore[arg-type]
            env,  # type: ignore[arg-type]
            learning_rate=config.learning_rate,
            n_steps=config.n_steps,
            gamma=config.gamma,
            gae_lambda=config.gae_lambda,
            ent_coef=0.0,  # set below: a number, or adaptive ("auto")
            vf_coef=config.vf_coef,
            max_grad_norm=config.max_grad_norm,
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
        #: The NaN guard: skipped optimizer steps, and when to stop.
        self.guard = NanGuard(config.max_consecutive_skips)
        #: The entropy bonus's weight now (``ent_coef="auto"`` moves it after every step).
        self.ent_coef, self.ent_coef_auto = parse_ent_coef(config.ent_coef)
        self.clip_range: Schedule = FloatSchedule(float(config.clip_range))
        #: What each rollout shows besides its turns (rollout/* figures).
        self.monitor = RolloutMonitor(config.n_logged_samples)
        #: max |ratio - 1| on the first minibatch of the last update (invariant: ~0).
        self.first_ratio_error = float("nan")
        #: Mean turns per forward/backward pass in the last update (micro_batch_size or auto).
        self.turns_per_pass = float("nan")
        self._shuffle_rng = np.random.default_rng(seed)
        #: Where the last :meth:`save` wrote (``None`` before the first); named by the NaN guard.
        self.last_checkpoint: Path | None = None
        #: Episodes that were in progress at the checkpoint and started over on resume.
        self.restarted_episodes = 0
        self._pending_resume: dict[str, Any] | None = None
        #: True while a rollout is being collected (a checkpoint then cannot resume exactly).
        self._in_rollout = False
        if _init_setup_model:
            self._setup_model()

    # --- what users and the tests read off the parts ---------------------------------------------

    @property
    def clip_range_value(self) -> float:
        """The clip range as a number (``clip_range`` is SB3's schedule of it)."""
        return float(self.config.clip_range)

    @property
    def n_logged_samples(self) -> int:
        """(prompt, reply, reward) examples written to TensorBoard per rollout."""
        return self.monitor.n_logged_samples

    @property
    def max_consecutive_skips(self) -> int:
        """The NaN guard stops training after this many skipped steps in a row."""
        return self.guard.max_consecutive_skips

    @property
    def skipped_steps(self) -> int:
        """Optimizer steps skipped by the NaN guard over the run (``train/skipped_steps``)."""
        return self.guard.skipped_steps

    @property
    def invalid_action_rate(self) -> float:
        """Share of replies the env could not parse in the last rollout."""
        return self.monitor.invalid_action_rate

    @property
    def rollout_action_probs(self) -> dict[str, np.ndarray]:
        """Choice mode: each observation's action probabilities in the last rollout."""
        return self.monitor.action_probs

    @property
    def q_critic(self) -> QCritic | None:
        """``advantage_estimator="q"``: the action values the advantages are read from."""
        return self.advantage_source.q_critic

    @property
    def advantage_scale(self) -> RunningMeanStd:
        """Running std of every advantage so far: the scale of ``normalize_advantage``."""
        return self.advantage_source.scale

    @property
    def nonfinite_turns(self) -> int:
        """Turns of the last rollout left out of the update for a non-finite advantage."""
        return self.advantage_source.nonfinite_turns

    @property
    def floor_in_rollout(self) -> bool:
        """Whether the floor acts on how the rollout samples (``floor_mode="behaviour"`` with a
        floor above 0), leaving the policy and its loss free of it."""
        return self.floor_mode == "behaviour" and self.min_action_prob > 0

    @property
    def fsdp(self) -> bool:
        """Full fine-tuning's weights are sharded over the processes (FSDP)."""
        return self.parallel.fsdp

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

    def set_random_seed(self, seed: int | None = None) -> None:
        """SB3's, with each process of a data-parallel job on its own seeds
        (:meth:`DataParallel.process_seed`)."""
        n_envs = self.env.num_envs if self.env is not None else self.n_envs
        super().set_random_seed(self.parallel.process_seed(seed, n_envs))

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
        return wrap_text_env(env, monitor_wrapper)  # SB3's hook: text envs are never DummyVecEnv

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
        self.advantage_estimator, self.policy_update = resolve_auto(
            self.advantage_estimator, self.policy_update, q_unavailable(self.policy) is None
        )
        self.min_action_prob = resolve_floor(
            self.min_action_prob,
            self.advantage_estimator,
            self.policy_update,
            len(self.policy.actions_list),
        )
        check_listed_actions(
            self.policy,
            self.policy_update == "target",
            self.ent_coef_auto,
            self.min_action_prob,
        )
        self.floor_mode = resolve_floor_mode(self.floor_mode, self.policy_update, self.policy)
        check_behaviour_floor(self.floor_mode, self.policy_update, self.policy)
        check_floor_balance(self.floor_balance, self.floor_mode, self.advantage_estimator)
        self.parallel.start_equal(self.policy)
        #: The update's forward/backward passes over each minibatch.
        self.passes = UpdatePasses(self.policy, self.config, self.device)
        q_critic = None
        if self.advantage_estimator == "q":
            q_critic = QCritic(
                self.policy, self.n_envs, self.q_gamma, self.q_n_steps, self.q_cut,
                self.q_replay_ratio, seed=self.seed,
                settings=replace(Q_DEFAULTS, huber_delta=float(self.q_huber_delta)),
                replay_balance=float(self.q_replay_balance),
                fit=self.q_fit,
            )  # fmt: skip
        #: Where the update's advantages come from (GAE, critic-free, action values), and
        #: their running scale.
        self.advantage_source = AdvantageSource(self.advantage_estimator, q_critic)
        self.rollout_buffer = TextRolloutBuffer(
            self.n_steps,
            self.n_envs,
            device=self.device,
            gae_lambda=self.gae_lambda,
            gamma=self.gamma,
        )

    def _setup_learn(
        self,
        total_timesteps: int,
        callback: Any = None,
        reset_num_timesteps: bool = True,
        tb_log_name: str = "run",
        progress_bar: bool = False,
    ) -> tuple[int, BaseCallback]:
        pending, self._pending_resume = self._pending_resume, None
        resuming = pending is not None and not reset_num_timesteps
        if not self.parallel.setup_learn(self.policy, resuming):  # one log, one progress bar
            self.tensorboard_log, self.verbose, progress_bar = None, 0, False
        if resuming and self.env is not None:
            assert pending is not None
            self.restarted_episodes = resume_envs(self, pending)
        with learn_logging(self, tb_log_name, reset_num_timesteps):
            return super()._setup_learn(
                total_timesteps, callback, reset_num_timesteps, tb_log_name, progress_bar
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

    # --- rollouts ------------------------------------------------------------------------------

    def collect_rollouts(
        self,
        env: VecEnv,
        callback: BaseCallback,
        rollout_buffer: Any,
        n_rollout_steps: int,
    ) -> bool:
        """Fill the buffer with ``n_rollout_steps`` batched policy calls (one per vector step):
        truncated episodes bootstrap from the value of their last observation, and the
        critic-free estimators replace GAE's advantages after the rollout."""
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
        policy, monitor = self.policy, self.monitor
        policy.set_training_mode(False)
        buffer.reset()
        callback.on_rollout_start()
        n_steps = 0
        processes = world_size()
        finished: list[dict[str, Any]] = []  # Monitor's records of the episodes that ended
        # A generating policy over a fixed list: its valid replies' actions give the diagnostics.
        listed = None if policy.scores_listed_actions else policy.actions_list
        monitor.start(listed, policy.truncated_prompts)
        dones = np.zeros(env.num_envs, dtype=bool)
        estimates = self.advantage_source
        replies = policy.listed_replies if self.floor_in_rollout else []
        # floor_balance: the floor shared by the plays the values' replay holds (checked at set-up)
        plays = self.q_critic.replay.plays if self.q_critic and self.floor_balance > 0 else None
        while n_steps < n_rollout_steps:
            observations: np.ndarray = self._last_obs  # type: ignore[assignment]
            with torch.inference_mode():
                step = policy.act(list(observations))
            monitor.before_step(observations, step)  # the policy's (diagnostics, the target)
            if self.floor_in_rollout:  # the rollout explores; the replay reads what it played
                shares = (
                    None
                    if plays is None
                    else rare_first(plays(list(observations)), self.floor_balance)
                )
                step = explore(step, self.min_action_prob, replies, shares)
            new_obs, rewards, dones, infos = env.step(np.array(step.replies, dtype=object))
            self.num_timesteps += env.num_envs * processes  # env steps of every process
            callback.update_locals(locals())
            if not every_process(callback.on_step()):  # all stop together, none waits forever
                return False
            self._update_info_buffer(infos, dones)
            if processes > 1:
                finished.extend(info["episode"] for info in infos if "episode" in info)
            n_steps += 1
            monitor.observe(observations, step, rewards, infos)
            rewards = rewards.astype(np.float32) * self.reward_scale
            estimates.add_turns(observations, step, new_obs, rewards, dones, infos)
            for idx, done in enumerate(dones):
                terminal = infos[idx].get("terminal_observation")
                if done and terminal is not None and infos[idx].get("TimeLimit.truncated", False):
                    with torch.inference_mode():
                        terminal_value = policy.predict_values([str(terminal)])[0]
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
            last_values = policy.predict_values(list(self._last_obs))  # type: ignore[arg-type]
        buffer.compute_returns_and_advantage(last_values=last_values.float(), dones=dones)
        estimates.after_rollout(buffer, dones, n_steps, self.num_timesteps, self.gamma, self.logger)
        # Episode statistics and counts over every process (the same in each).
        for source, records in enumerate(gather_objects(finished)):
            if source != rank():
                self.ep_info_buffer.extend(records)  # type: ignore[union-attr]
        monitor.finish(
            self.logger,
            turns=n_steps * env.num_envs,
            processes=processes,
            truncated_prompts=policy.truncated_prompts,
            per_state=policy.per_state,
            num_timesteps=self.num_timesteps,
            remedies=collapse_remedies(policy),
        )
        callback.update_locals(locals())
        callback.on_rollout_end()
        return True

    # --- the update ----------------------------------------------------------------------------

    def train(self) -> None:
        """Clipped-surrogate PPO over ``n_epochs`` of shuffled minibatches of turns (with
        gradients and optimizer sharded under FSDP: :mod:`gym_llm.rl.common.sharding`)."""
        lm = self.policy.lm
        self._calibrate_action_head()
        with sharded_update(lm) if is_sharded(lm) else contextlib.nullcontext():
            self._train()

    def _calibrate_action_head(self) -> None:
        """Before the first step, the action head's centre and scale from this rollout's
        distinct observations (the main process's, so that every process holds the same)."""
        head = self.policy.action_head
        if head is None or head.is_calibrated:
            return
        seen = dict.fromkeys(str(o) for o in self.rollout_buffer.observations_text.reshape(-1))
        self.policy.calibrate_action_head(from_main_process(list(seen)))

    def _train(self) -> None:
        policy, buffer = self.policy, self.rollout_buffer
        lockstep = is_sharded(policy.lm)
        centre, scale = self.advantage_source.normalisation(buffer, self.normalize_advantage)
        value_scale = self._update_value_statistics()
        targets = self._choice_targets(centre, scale) if self.policy_update == "target" else None
        old_probs = self._rollout_policy_probs()  # the target update's exact KL
        policy.set_training_mode(True)
        self._update_learning_rate(policy.optimizer)
        clip = self.clip_range(self._current_progress_remaining)
        stats: defaultdict[str, list[float]] = defaultdict(list)
        continue_training, first = True, True
        epoch = 0
        finite = buffer.finite_turns()
        same_in_every_process(int(finite.sum()), "The number of finite turns")
        if not finite.any():  # nothing to learn from: one skip
            policy.set_training_mode(False)
            self.guard.skip(
                "advantage or return in every turn", [], self.logger, self.last_checkpoint
            )
            self.logger.record("train/skipped_steps", self.skipped_steps)
            self.logger.record("train/nonfinite_turns", self.nonfinite_turns)
            return
        warmup = self.num_timesteps <= self.critic_warmup_steps
        # The optimizer's parameters: under FSDP the shards it steps (the module holds the
        # gathered whole weights, whose gradients FSDP moves to the shards).
        trainable = [p for group in policy.optimizer.param_groups for p in group["params"]]
        value_ids = {id(p) for p in policy.value_head.parameters()}
        frozen_now = (  # during the critic's warm-up the policy's weights wait
            [p for p in trainable if id(p) not in value_ids] if warmup else []
        )
        for epoch in range(self.n_epochs):
            for batch in buffer.minibatches(self.batch_size, self._shuffle_rng):
                policy.optimizer.zero_grad(set_to_none=True)
                grads = self.passes.accumulate(
                    batch, (batch.advantages - centre) / scale, self._loss_settings(clip),
                    value_scale, targets, stats, old_probs,
                )  # fmt: skip
                if first:
                    self.first_ratio_error, first = grads.max_ratio_error, False
                kl = global_mean(float(np.mean(grads.kl))) if self.target_kl is not None else 0.0
                if self.target_kl is not None and kl > 1.5 * self.target_kl:
                    continue_training = False
                    if self.verbose >= 1:
                        self.logger.info(
                            f"Early stopping at epoch {epoch} (approx_kl {np.mean(grads.kl):.4f})"
                        )
                    break
                average_gradients(trainable)  # data-parallel: the mean over the processes
                for param in frozen_now:
                    param.grad = None
                value_grads = [p.grad for p in policy.value_head.parameters() if p.grad is not None]
                stats["value_grad_norm"].append(float(get_total_norm(value_grads)))
                if lockstep:  # sharded and whole gradients
                    norm = clip_grad_norm(trainable, self.max_grad_norm)
                else:
                    norm = torch.nn.utils.clip_grad_norm_(trainable, self.max_grad_norm)
                stats["grad_norm"].append(float(norm))
                cause = grads.bad_cause or ("gradient" if not torch.isfinite(norm) else None)
                if cause is None and any_process(grads.bad_cause is not None):
                    cause = "loss or value in another process"
                if cause is not None:  # the NaN guard: this step never reaches the weights
                    policy.optimizer.zero_grad(set_to_none=True)
                    self.guard.skip(cause, batch.observations, self.logger, self.last_checkpoint)
                    continue
                self.guard.passed()
                policy.optimizer.step()
                if lockstep:  # the whole weights from the stepped shards
                    refresh(policy.lm)
                if self.ent_coef_auto:
                    if self.target_entropy_of == "marginal":  # over every process already
                        held = marginal_entropy(grads.probs)
                    else:
                        held = global_mean(float(np.sum(grads.entropy)))
                    self._adapt_ent_coef(held)
                self._n_updates += 1
            if not continue_training:
                break
        policy.set_training_mode(False)
        self._log_update(stats, clip, warmup, continue_training, epoch)

    def _adapt_ent_coef(self, entropy: float) -> None:
        """``ent_coef="auto"``: after a step, from its minibatch's ``entropy`` (of states or
        marginal: ``target_entropy_of``)."""
        k = len(self.policy.actions_list)
        self.ent_coef = next_ent_coef(self.ent_coef, entropy, self.target_entropy, k)

    def _loss_settings(self, clip: float) -> LossSettings:
        return LossSettings(
            clip_range=clip,
            clip_range_vf=self.clip_range_vf,
            vf_coef=self.vf_coef,
            ent_coef=self.ent_coef,
            adaptive_entropy=self.ent_coef_auto,
            min_action_prob=0.0 if self.floor_in_rollout else self.min_action_prob,
            kl_coef=self.kl_coef,
        )

    def _log_update(
        self,
        stats: dict[str, list[float]],
        clip: float,
        warmup: bool,
        continue_training: bool,
        epoch: int,
    ) -> None:
        state = UpdateState(
            clip_range=clip,
            ent_coef=self.ent_coef,
            first_ratio_error=self.first_ratio_error,
            early_stopped=not continue_training,
            epochs=epoch + 1,
            n_updates=self._n_updates,
            critic_warmup=warmup,
            skipped_steps=self.skipped_steps,
            nonfinite_turns=self.nonfinite_turns,
            learning_rate=self.policy.optimizer.param_groups[0]["lr"],
        )
        buffer = self.rollout_buffer
        self.turns_per_pass = record_update(
            self.logger, stats, buffer.values.flatten(), buffer.returns.flatten(), state
        )

    def _choice_targets(self, centre: float, scale: float) -> dict[str, torch.Tensor]:
        """``policy_update="target"``: each observation's target distribution over the listed
        actions (:meth:`AdvantageSource.choice_targets`)."""
        return self.advantage_source.choice_targets(
            self.rollout_buffer, centre, scale, self.rollout_action_probs,
            len(self.policy.actions_list), self.kl_step, self.device, self.logger,
        )  # fmt: skip

    def _rollout_policy_probs(self) -> dict[str, torch.Tensor] | None:
        """The target update's rollout policy per observation over the listed actions (on the
        device): with whole distributions the KL is exact, not estimated (k3) from the moves
        played (which, under the behaviour floor, the policy did not all draw)."""
        probs, target = self.rollout_action_probs, self.policy_update == "target"
        return rows_on_device(probs, self.device) if target and probs else None

    def _update_value_statistics(self) -> float:
        """``value_normalization``: pool this rollout's returns into the value head's running
        statistics (over every process, so that each holds the same head) before any step.
        The head's std: return units per unit of its output, 1 without normalisation."""
        head = self.policy.value_head
        if head.normalize:
            returns = self.rollout_buffer.returns
            head.update_statistics(global_moments(returns[np.isfinite(returns)].reshape(-1)))
        return head.std

    # --- save / load ---------------------------------------------------------------------------

    def training_state(self) -> dict[str, Any]:
        """The run's random state and bookkeeping, as JSON-ready data (``training_state.json``)."""
        return {
            **algorithm_state(self, self._shuffle_rng, at_boundary=not self._in_rollout),
            "first_greedy": dict(self.monitor.first_greedy),
            "skipped_steps": int(self.skipped_steps),
        }

    def restore_training_state(self, state: dict[str, Any]) -> None:
        """Restore the generators now; the envs' part waits for ``learn(...,
        reset_num_timesteps=False)`` (a fresh ``learn`` resets the envs as usual). In a job of
        several processes each keeps its own seeds (the saved ones are one process's: every
        process would sample the same replies) and an exact resume is refused."""
        if self.parallel.resumes_exactly():
            restore_global_rng_state(state["rng"])
            self._shuffle_rng = generator_from_state(state["shuffle_rng"])
            self.monitor.first_greedy = {str(k): int(v) for k, v in state["first_greedy"].items()}
            self.guard.skipped_steps = int(state.get("skipped_steps", 0))
            self._episode_num = int(state["episode_num"])
        self._pending_resume = state

    def saved_config(self) -> SavedConfig:
        """What ``config.json`` records: hyper-parameters, the policy's settings in effect, the
        counters and the spaces."""
        hyper = {
            k: getattr(self, k) for k in SAVED_HYPERPARAMETERS if not callable(getattr(self, k))
        }
        if self.ent_coef_auto:  # adaptive: it resumes from where it got to
            hyper["ent_coef"] = f"auto_{self.ent_coef}"
        return SavedConfig.of(self, hyper)

    def save(  # type: ignore[override]
        self,
        path: str | os.PathLike[str],
        exclude: Any = None,
        include: Any = None,
        *,
        extra_json: Mapping[str, Any] | None = None,
    ) -> None:
        """Write a directory: ``config.json`` + ``policy.pt`` (adapter, value head, optimizer)
        + ``training_state.json``, plus a JSON file for each ``extra_json`` entry
        (``Agent.save`` adds ``agent.json``).

        Never a pickled model or tokenizer; the base weights only when nothing else names them
        (a model object with no name or path: ``base_model/``, loaded back from there).
        ``agent.zip`` (SB3's spelling) writes the directory ``agent``. The directory is written
        next to ``path`` and renamed into place, so a failed save leaves the previous checkpoint
        intact. In a job of several processes only the main process writes (FSDP: call it in
        every process; it gathers the optimizer's moments).
        """

        def write() -> None:
            texts = {
                "config.json": self.saved_config().to_json(),
                TRAINING_STATE: json.dumps(self.training_state(), default=float),
            }
            write_agent_directory(
                path, texts, agent_tensors(self), extra_json, base_model_writer(self.policy)
            )
            self.last_checkpoint = agent_path(path)

        self.parallel.save(self.policy, write)

    @classmethod
    def load(  # type: ignore[override]
        cls: type[SelfPPO],
        path: str | os.PathLike[str],
        env: GymEnv | None = None,
        device: torch.device | str = "auto",
        **kwargs: Any,
    ) -> SelfPPO:
        """Rebuild an agent saved by :meth:`save`; ``env`` is optional (needed to keep training)."""
        saved = SavedConfig.read(path)
        hyper = {**saved.constructor_kwargs(), **kwargs}
        policy_kwargs = saved.load_policy_kwargs()
        saved_actions = saved.action_space["actions"]
        if env is None:
            observation_space, action_space = saved.spaces()
            model = cls.from_spaces(
                observation_space,
                action_space,
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
        model.load_policy_state(path)
        return model

    def load_policy_state(self, path: str | os.PathLike[str]) -> None:
        """Load the trained state a :meth:`save` directory holds (adapter, value head, optimizer,
        counters, and the random state a resumed :meth:`learn` continues from) into this
        already-built agent; shared by ``PPO.load`` and ``Agent.load``."""
        load_trained_state(self, path)
