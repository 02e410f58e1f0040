"""``PPO``: SB3's on-policy algorithm, trained on text turns with token-level log-probs.

Everything SB3 users know keeps working (constructor style, ``learn()``, callbacks, logger and
TensorBoard, ``progress_bar``, ``predict``, ``evaluate_policy``); what differs is what an LLM
needs: rollouts are batched LM calls over strings, the buffer stores token sequences, the loss is
the clipped surrogate per action token with the turn's GAE advantage, gradients are accumulated
over micro-batches, and an optional KL penalty pulls towards the reference model (the same weights
with the LoRA adapter disabled; no second copy in memory).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.type_aliases import GymEnv, Schedule
from stable_baselines3.common.utils import FloatSchedule
from stable_baselines3.common.vec_env import VecEnv

from gym_llm.policy.llm_policy import LLMPolicy
from gym_llm.rl.common.checkpoint import SavedConfig
from gym_llm.rl.common.distributed import init_from_launcher
from gym_llm.rl.common.sharding import requested_by_launcher
from gym_llm.rl.common.vec_env import check_text_env, wrap_text_env
from gym_llm.rl.ppo.advantages import check_estimator
from gym_llm.rl.ppo.buffer import TextRolloutBuffer
from gym_llm.rl.ppo.data_parallel import DataParallel
from gym_llm.rl.ppo.entropy_control import (
    check_entropy_of,
    check_floor,
    check_listed_actions,
    parse_ent_coef,
)
from gym_llm.spaces import TextActions, TextObservations

SelfPPO = TypeVar("SelfPPO", bound="PPO")

#: PPO's learning rate with LoRA when none is given. Measured on SmolLM2-135M with the default
#: LoRA (benchmarks/RESULTS.md, "HighLow"): 1e-4 left a number rule at 0.8-0.9 success after 1,024
#: env steps in 4 seeds out of 4; 5e-4 reached 1.0 by 768 steps in all 4.
LORA_LEARNING_RATE = 5e-4
#: ... and without LoRA (every weight trains; LoRA's rates would wreck a pretrained model).
FULL_FINETUNE_LEARNING_RATE = 1e-5


#: Passes over each rollout. Four, not two, measured on the task family's tuning split (10 seeds
#: per task, benchmarks/RESULTS.md, "More learning per env step"): never fewer seeds reaching
#: 90 % of the gap on any task, more on the grid (8 against 3), the walk and the range rule,
#: for ~1.7x the update time per env step.
DEFAULT_N_EPOCHS = 4


def default_learning_rate(policy_kwargs: dict[str, Any] | None) -> float:
    """:data:`LORA_LEARNING_RATE`, or :data:`FULL_FINETUNE_LEARNING_RATE` with ``lora=None``."""
    full = (policy_kwargs or {}).get("lora", "default") is None
    return FULL_FINETUNE_LEARNING_RATE if full else LORA_LEARNING_RATE


class PPO(DataParallel):
    """Proximal Policy Optimization for :class:`LLMPolicy` on text envs.

    SB3's PPO arguments keep their meaning. Started by ``torchrun`` or ``accelerate launch``
    with several processes, the same script trains data-parallel: each process steps its own
    envs (seeded ``seed + rank * n_envs``), gradients are averaged over the processes every
    optimizer step, ``total_timesteps`` counts the env steps of all of them, and only the main
    process writes TensorBoard, the progress bar and ``save`` (see :mod:`gym_llm.rl.common.distributed`).

    SB3's PPO arguments keep their meaning (``n_steps``, ``batch_size``, ``n_epochs``, ``gamma``,
    ``gae_lambda``, ``clip_range``, ``clip_range_vf``, ``normalize_advantage``, ``vf_coef``,
    ``max_grad_norm``, ``target_kl``, ``stats_window_size``, ``tensorboard_log``,
    ``policy_kwargs`` (:class:`LLMPolicy`'s: ``model``, ``lora``, ...), ``verbose``, ``seed``,
    ``device``, ``_init_setup_model``; see SB3's ``PPO``), and their defaults except
    ``n_steps`` (64: an LLM step costs a forward pass), ``n_epochs`` (below) and
    ``max_grad_norm`` (1.0). The LLM-specific arguments:

    Args:
        learning_rate: ``None`` (default): 5e-4 with LoRA, 1e-5 for full fine-tuning
            (:func:`default_learning_rate`, measured); a float or an SB3 schedule otherwise.
        n_epochs: passes over each rollout; 4 by default (SB3's PPO: 10), measured
            (:data:`DEFAULT_N_EPOCHS`).
        ent_coef: weight of the entropy bonus; ``"auto"`` (or ``"auto_0.05"``, its start) adapts
            it after every optimizer step to hold the mean per-state entropy at
            ``target_entropy`` (SAC-discrete's rule, :mod:`gym_llm.rl.ppo.entropy_control`; choice
            mode, or generate mode with the action head: the entropy of each reply's decision
            token among the listed actions). Logged as ``train/ent_coef``.
        target_entropy: the entropy ``"auto"`` holds, in nats; ``None``: 0.3 of ``log K``.
        target_entropy_of: ``"state"`` (the mean per-state entropy) or ``"marginal"`` (that of the
            batch's mean action distribution: high for a state-dependent policy, however certain).
        min_action_prob: a floor on every listed action's probability in every state (choice
            mode, or generate mode with the action head: at the reply's decision token), held
            by a log-barrier in the loss (:func:`~gym_llm.rl.ppo.losses.probability_floor`); 0 (default): off.
        policy_update: ``"clip"`` (default): PPO's clipped surrogate. ``"target"`` (choice
            mode): cross-entropy to the old policy tilted by each state's mean advantage per
            action, ``pi_old · exp(A / eta)``, a step of ``kl_step`` nats
            (:mod:`gym_llm.rl.ppo.target_update`): its logit gradient ``pi - target`` is not damped
            for an action the policy has cornered at p ~ 0, where PPO's ``p (1 - p) A`` is.
        kl_step: ``policy_update="target"``: the mean ``KL(target || pi_old)`` per update, nats.
        kl_coef: weight of the KL penalty to the reference model (adapter disabled); 0 = off.
        micro_batch_size: turns per forward/backward pass; gradients are accumulated over the
            minibatch (``batch_size``), so memory scales with this, not with ``batch_size``.
            ``None`` (default): as many turns as fit the update's memory budget
            (:data:`UPDATE_MEMORY_BUDGET_MB` on the CPU, a quarter of the free memory on a
            GPU), estimated by :meth:`LLMPolicy.update_bytes_per_turn` for each minibatch. Fewer,
            larger passes are faster, and the shared prompt prefix is encoded once per pass.
        n_logged_samples: (prompt, reply, reward) examples written to TensorBoard per rollout.
        advantage_estimator: ``"gae"`` (turn-level GAE with the critic, default) or a critic-free
            one: ``"rebn"``, ``"grpo"``, ``"rloo"``, ``"gigpo"`` (see :mod:`gym_llm.rl.ppo.advantages`).
            The critic is still trained (``vf_coef``) and its explained variance logged.
        clip_range_vf: clip the value loss around the rollout's values (PPO2, SB3's
            ``clip_range_vf``); ``None`` = no clipping. In units of (scaled) return.
        reward_scale: every reward is multiplied by this before advantages and returns (GLAM
            used 20 for sparse 0/1 rewards; returns in the hundreds want < 1). Logged episode
            returns stay unscaled.
        critic_warmup_steps: for the first this many env steps only the value head trains (the
            policy's weights get no update), so the first policy updates see a critic that
            already predicts something (TWOSOME warms its critic up for 5k steps).
        max_consecutive_skips: the NaN guard skips an optimizer step whose loss, gradient or
            value is not finite (``train/skipped_steps``); after this many in a row, training
            stops with a :class:`~gym_llm.rl.ppo.update.NonFiniteTrainingError` naming the cause
            and the last checkpoint. Turns whose reward is not finite are left out of the update
            (``train/nonfinite_turns``), so one bad reward costs its episode, not the run.
        fsdp: shard full fine-tuning's weights, gradients and Adam moments over the processes
            (FSDP2; :mod:`gym_llm.rl.common.sharding`), from the first ``learn()`` on. ``None``
            (default): as ``accelerate launch --use_fsdp`` says (``ACCELERATE_USE_FSDP``). Needs
            ``lora=None`` and several processes; call ``save`` in every process (it gathers).
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
        n_epochs: int = DEFAULT_N_EPOCHS,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        clip_range: float = 0.2,
        normalize_advantage: bool = True,
        ent_coef: float | str = 0.0,
        target_entropy: float | None = None,
        target_entropy_of: str = "state",
        min_action_prob: float = 0.0,
        policy_update: str = "clip",
        kl_step: float = 0.05,
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
        max_consecutive_skips: int = 10,
        fsdp: bool | None = None,
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
        # Under torchrun / accelerate launch: join the job (and pick this process's GPU) before
        # the device is resolved and the model built. A no-op in one process.
        init_from_launcher()
        super().__init__(
            policy,  # type: ignore[arg-type]
            env,  # type: ignore[arg-type]
            learning_rate=learning_rate,
            n_steps=n_steps,
            gamma=gamma,
            gae_lambda=gae_lambda,
            ent_coef=0.0,  # set below: a number, or adaptive ("auto")
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
        if max_consecutive_skips < 1:
            raise ValueError(f"max_consecutive_skips must be >= 1, got {max_consecutive_skips}.")
        if critic_warmup_steps < 0:
            raise ValueError(f"critic_warmup_steps must be >= 0, got {critic_warmup_steps}.")
        self.advantage_estimator = check_estimator(advantage_estimator)
        self.ent_coef, self.ent_coef_auto = parse_ent_coef(ent_coef)
        if target_entropy is not None and not target_entropy > 0:
            raise ValueError(f"target_entropy must be > 0 nats (or None), got {target_entropy}.")
        self.target_entropy = target_entropy
        self.target_entropy_of = check_entropy_of(target_entropy_of, self.ent_coef_auto)
        self.min_action_prob = check_floor(min_action_prob)
        if policy_update not in ("clip", "target"):
            raise ValueError(f"policy_update must be 'clip' or 'target', got {policy_update!r}.")
        if not kl_step > 0:
            raise ValueError(f"kl_step must be > 0 nats, got {kl_step}.")
        self.policy_update, self.kl_step = policy_update, float(kl_step)
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
        self._warned_input_ignored = False
        self.rollout_action_probs: dict[str, np.ndarray] = {}
        # The NaN guard (gym_llm.rl.ppo.update) and resuming (gym_llm.rl.ppo.training_state).
        self.max_consecutive_skips = max_consecutive_skips
        self.fsdp = requested_by_launcher() if fsdp is None else bool(fsdp)
        self.skipped_steps = self._consecutive_skips = self.nonfinite_turns = 0
        self.last_checkpoint: Path | None = None
        self.restarted_episodes = 0
        self._pending_resume: dict[str, Any] | None = None
        self._in_rollout = False
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
        check_listed_actions(
            self.policy,
            self.policy_update == "target",
            self.ent_coef_auto,
            self.min_action_prob,
        )
        self._start_equal()
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
