"""``DQN``: SB3's off-policy algorithm, learning action values on the language model's features.

Every env step is replayed many times (SB3 DQN's defaults replay each one ~8 times), and
``Q(s, a)`` of every listed action is regressed however rarely the policy picks it: what PPO
cannot do for an action the LM's prior has cornered at p ~ 0. The values are an MLP
(:class:`~gym_llm.policy.q_head.QHead`) on the frozen features of the prompt's last token, and the
agent acts with the posterior ``p_LM(a | s)^beta · exp(Q(s, a) / alpha)`` mixed with ε-uniform
exploration (:mod:`gym_llm.rl.dqn.targets`). Features and prior come from the model with its
adapter off, so each distinct observation costs one model pass for the whole run.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.type_aliases import GymEnv
from stable_baselines3.common.utils import LinearSchedule, polyak_update, update_learning_rate
from stable_baselines3.common.vec_env import VecEnv

from gym_llm.configs import ConfigField, with_settings
from gym_llm.policy.llm_policy import LLMPolicy
from gym_llm.policy.q_head import QHead
from gym_llm.rl.common.base_model import base_model_writer
from gym_llm.rl.common.checkpoint import (
    DQN_FORMAT,
    DQN_HYPERPARAMETERS,
    SavedConfig,
)
from gym_llm.rl.common.checkpoint_files import (
    CheckpointError,
    agent_path,
    read_tensors,
    write_agent_directory,
)
from gym_llm.rl.common.frozen_features import FrozenFeatures
from gym_llm.rl.common.learn_logger import learn_logging
from gym_llm.rl.common.vec_env import check_text_env, wrap_text_env
from gym_llm.rl.dqn.config import DQNConfig
from gym_llm.rl.dqn.distill import distill_steps
from gym_llm.rl.dqn.replay import TextReplayBuffer
from gym_llm.rl.dqn.schedules import harmonic_rate_factor
from gym_llm.rl.dqn.targets import posterior_logits
from gym_llm.rl.dqn.td import QHeads, td_step
from gym_llm.spaces import as_text_batch

SelfDQN = TypeVar("SelfDQN", bound="DQN")


class DQN(OffPolicyAlgorithm):
    """Deep Q-learning for :class:`LLMPolicy` on text envs in choice mode.

    ``DQN(policy, env, config=None, **settings)``: the settings are :class:`DQNConfig`'s fields
    (SB3's DQN arguments keep their meaning and defaults, plus ``n_steps`` for n-step returns,
    with double Q-learning and the Huber loss), given as a config, as keyword arguments
    replacing its fields, or both; SB3's own arguments (``stats_window_size``,
    ``tensorboard_log``, ``policy_kwargs``, ``verbose``, ``seed``, ``device``,
    ``_init_setup_model``) are keyword arguments as in SB3. ``policy_kwargs`` are
    :class:`LLMPolicy`'s (``model``, ``lora``, ...): the LoRA adapter does not act here; the
    model with the adapter off gives the features and the prior, and the distilled LM plays
    alone (``model.policy.predict``).
    """

    policy_aliases: ClassVar[dict[str, type[Any]]] = {"LLMPolicy": LLMPolicy}
    policy: LLMPolicy
    replay_buffer: TextReplayBuffer  # type: ignore[assignment]

    buffer_size: ConfigField[int] = ConfigField()
    learning_rate_decay: ConfigField[int] = ConfigField()
    learning_starts: ConfigField[int] = ConfigField()
    batch_size: ConfigField[int] = ConfigField()
    tau: ConfigField[float] = ConfigField()
    gamma: ConfigField[float] = ConfigField()
    train_freq: ConfigField[Any] = ConfigField()
    gradient_steps: ConfigField[int] = ConfigField()
    n_steps: ConfigField[int] = ConfigField()
    target_update_interval: ConfigField[int] = ConfigField()
    average_tau: ConfigField[float] = ConfigField()
    exploration_fraction: ConfigField[float] = ConfigField()
    exploration_initial_eps: ConfigField[float] = ConfigField()
    exploration_final_eps: ConfigField[float] = ConfigField()
    max_grad_norm: ConfigField[float] = ConfigField()
    alpha: ConfigField[float] = ConfigField()
    beta: ConfigField[float] = ConfigField()
    q_width: ConfigField[int] = ConfigField()
    huber_delta: ConfigField[float] = ConfigField()
    distill_interval: ConfigField[int] = ConfigField()
    distill_steps: ConfigField[int] = ConfigField()
    distill_final_steps: ConfigField[int] = ConfigField()
    distill_batch_size: ConfigField[int] = ConfigField()
    distill_learning_rate: ConfigField[float] = ConfigField()

    def __init__(
        self,
        policy: str | type[LLMPolicy],
        env: GymEnv | str | None,
        config: DQNConfig | None = None,
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
        #: Every setting, as ``save`` records it (``model.alpha`` is ``model.config.alpha``).
        self.config = config = with_settings(DQNConfig, config, settings, "DQN")
        if config.gradient_steps is None:  # one TD step per env and phase (DQNConfig)
            config.gradient_steps = env.num_envs if isinstance(env, VecEnv) else 1
        super().__init__(
            policy,
            env,  # type: ignore[arg-type]
            config.learning_rate,
            buffer_size=config.buffer_size,
            learning_starts=config.learning_starts,
            batch_size=config.batch_size,
            tau=config.tau,
            gamma=config.gamma,
            train_freq=config.train_freq,
            gradient_steps=config.gradient_steps,
            n_steps=config.n_steps,  # SB3 sets self.n_steps (the config's field) from it
            policy_kwargs=policy_kwargs,
            stats_window_size=stats_window_size,
            tensorboard_log=tensorboard_log,
            verbose=verbose,
            device=device,
            seed=seed,
            sde_support=False,
            support_multi_env=True,
        )
        self._next_distill = config.distill_interval
        self.exploration_rate = config.exploration_initial_eps
        self._n_calls = 0
        self._behaviour_probs: np.ndarray | None = None
        self._sample_rng = np.random.default_rng(seed)
        #: TD steps whose loss was not finite and so never reached the weights.
        self.skipped_steps = 0
        #: Where the last :meth:`save` wrote (``None`` before the first).
        self.last_checkpoint: Path | None = None
        if _init_setup_model:
            self._setup_model()

    @staticmethod
    def _wrap_env(env: GymEnv, verbose: int = 0, monitor_wrapper: bool = True) -> VecEnv:
        return wrap_text_env(env, monitor_wrapper)  # SB3's hook: text envs are never DummyVecEnv

    def _setup_model(self) -> None:
        self._setup_lr_schedule()
        self.set_random_seed(self.seed)
        self.policy = LLMPolicy(
            self.observation_space, self.action_space, self.lr_schedule, device=self.device,
            **self.policy_kwargs,
        )  # fmt: skip
        if not self.policy.scores_listed_actions or self.policy.per_state:
            raise ValueError(
                "DQN needs choice mode over one fixed list of actions (its Q head has one output "
                "per listed action); per-state action lists and generate mode train with PPO."
            )
        #: Each observation's prior and features, computed once per run.
        self.features = FrozenFeatures(self.policy)
        #: The listed actions, in the order of the values and the replay's action indices.
        self.action_names: list[str] = list(getattr(self.policy.action_space, "actions", []))
        n_actions = len(self.action_names)
        hidden = int(self.policy.lm.config.get_text_config().hidden_size)
        self.q_net = QHead(hidden, n_actions, width=self.q_width, device=self.device)
        self.q_net_target = copy.deepcopy(self.q_net).requires_grad_(False)
        #: The averaged values greedy actions read (``average_tau``; the online head at 1).
        self.q_net_average = copy.deepcopy(self.q_net).requires_grad_(False)
        self.q_optimizer = torch.optim.Adam(self.q_net.parameters(), lr=self.lr_schedule(1.0))
        #: The heads and optimizer one TD step works on.
        self.heads = QHeads(self.q_net, self.q_net_target, self.q_net_average, self.q_optimizer)
        for group in self.policy.optimizer.param_groups:  # the LM's, for distillation only
            group["lr"] = self.distill_learning_rate * group.get("lr_scale", 1.0)
        self.replay_buffer = TextReplayBuffer(self.buffer_size, self.n_envs, n_actions)
        self.exploration_schedule = LinearSchedule(
            self.exploration_initial_eps, self.exploration_final_eps, self.exploration_fraction
        )
        self._convert_train_freq()

    # --- features, values and the acting distribution ------------------------------------------

    def prior_and_features(self, observations: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(n, K)`` prior log-probs and ``(n, d)`` features, each distinct observation computed
        once per run (they do not change: the model's adapter is off for both)."""
        return self.features(observations)

    def action_logits(self, observations: Sequence[str], averaged: bool = False) -> torch.Tensor:
        """``(n, K)`` logits of the posterior ``beta · log p_LM + Q / alpha``, from the online
        values or, with ``averaged``, the averaged ones (``average_tau``)."""
        log_prior, features = self.prior_and_features(observations)
        head = self.q_net_average if averaged and self.average_tau < 1 else self.q_net
        with torch.no_grad():
            q = head(features)
        return posterior_logits(q, log_prior, self.alpha, self.beta)

    def behaviour_probs(self, observations: Sequence[str]) -> np.ndarray:
        """What the agent samples from while learning: ε uniform, else the posterior (uniform
        alone before ``learning_starts``, as SB3's DQN)."""
        n_actions = self.replay_buffer.n_actions
        uniform = np.full((len(observations), n_actions), 1.0 / n_actions)
        if self.num_timesteps < self.learning_starts:
            return uniform
        posterior = torch.softmax(self.action_logits(observations).double(), -1).cpu().numpy()
        eps = self.exploration_rate
        return eps * uniform + (1.0 - eps) * posterior

    def _replies(self, indices: np.ndarray) -> np.ndarray:
        return np.array([self.action_names[int(i)] for i in indices], dtype=object)

    def predict(  # type: ignore[override]
        self,
        observation: str | Sequence[str] | np.ndarray,
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
    ) -> tuple[Any, tuple[np.ndarray, ...] | None]:
        """Replies (action names) for one observation string or a batch: the averaged values'
        greedy action with ``deterministic``, else a sample from the online posterior."""
        batch, single = as_text_batch(observation)
        logits = self.action_logits(batch, averaged=deterministic)
        if deterministic:
            chosen = logits.argmax(-1).cpu().numpy()
        else:
            chosen = torch.distributions.Categorical(logits=logits).sample().cpu().numpy()
        replies = self._replies(chosen)
        return (replies[0] if single else replies), state

    # --- collecting ----------------------------------------------------------------------------

    def _sample_action(
        self, learning_starts: int, action_noise: Any = None, n_envs: int = 1
    ) -> tuple[np.ndarray, np.ndarray]:
        assert self._last_obs is not None
        observations, _ = as_text_batch(self._last_obs)
        probs = self.behaviour_probs(observations)
        cumulative = probs.cumsum(-1)
        draws = self._sample_rng.random((len(observations), 1))
        chosen = np.minimum((draws > cumulative).sum(-1), probs.shape[1] - 1)
        self._behaviour_probs = probs.astype(np.float32)
        return self._replies(chosen), chosen.astype(np.int64)

    def _store_transition(  # type: ignore[override]
        self,
        replay_buffer: TextReplayBuffer,
        buffer_action: np.ndarray,
        new_obs: Any,
        reward: np.ndarray,
        dones: np.ndarray,
        infos: list[dict[str, Any]],
    ) -> None:
        assert self._last_obs is not None and self._behaviour_probs is not None
        replay_buffer.add_step(
            as_text_batch(self._last_obs)[0], as_text_batch(new_obs)[0], buffer_action, reward,
            dones, infos, self._behaviour_probs,
        )  # fmt: skip
        self._last_obs = new_obs

    def _on_step(self) -> None:
        """SB3's DQN: the target network every ``target_update_interval`` env steps, and the
        exploration rate on its schedule."""
        self._n_calls += 1
        if self._n_calls % max(self.target_update_interval // self.n_envs, 1) == 0:
            polyak_update(self.q_net.parameters(), self.q_net_target.parameters(), self.tau)
        self.exploration_rate = self.exploration_schedule(self._current_progress_remaining)
        self.logger.record("rollout/exploration_rate", self.exploration_rate)

    # --- learning ------------------------------------------------------------------------------

    def _update_learning_rate(self, optimizers: Any) -> None:
        """SB3's schedule times the harmonic decay in env steps (``learning_rate_decay``)."""
        rate = self.lr_schedule(self._current_progress_remaining) * harmonic_rate_factor(
            self.num_timesteps, self.learning_rate_decay
        )
        self.logger.record("train/learning_rate", rate)
        for optimizer in optimizers if isinstance(optimizers, list) else [optimizers]:
            update_learning_rate(optimizer, rate)

    def _calibrate_q_net(self) -> None:
        """Fix the Q head's input scale from the distinct observations collected so far."""
        distinct = self.replay_buffer.distinct_observations()
        self.q_net.calibrate(self.prior_and_features(distinct)[1])
        self.q_net_target.load_state_dict(self.q_net.state_dict())
        self.q_net_average.load_state_dict(self.q_net.state_dict())

    def train(self, gradient_steps: int, batch_size: int = 32) -> None:
        if len(self.replay_buffer) < self.learning_starts:  # a loaded agent refilling its replay
            return
        if not self.q_net.is_calibrated:
            self._calibrate_q_net()
        self._update_learning_rate(self.q_optimizer)
        losses, q_means = [], []
        for _ in range(gradient_steps):
            sample = self.replay_buffer.sample(
                batch_size, self.n_steps, self.gamma, self._sample_rng
            )
            done = td_step(
                self.heads, sample, self.features, alpha=self.alpha, beta=self.beta,
                max_grad_norm=self.max_grad_norm, average_tau=self.average_tau,
                huber_delta=self.huber_delta,
            )  # fmt: skip
            if done is None:  # a non-finite reward or value never reaches the weights
                self.skipped_steps += 1
                continue
            losses.append(done[0])
            q_means.append(done[1])
        self._n_updates += gradient_steps
        if self.distill_interval and self.num_timesteps >= self._next_distill:
            while self._next_distill <= self.num_timesteps:
                self._next_distill += self.distill_interval
            self.logger.record("train/distill_loss", self.distill())
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/skipped_steps", self.skipped_steps)
        if losses:
            self.logger.record("train/loss", float(np.mean(losses)))
            self.logger.record("train/q_mean", float(np.mean(q_means)))

    def _setup_learn(
        self,
        total_timesteps: int,
        callback: Any = None,
        reset_num_timesteps: bool = True,
        tb_log_name: str = "run",
        progress_bar: bool = False,
    ) -> tuple[int, BaseCallback]:
        with learn_logging(self, tb_log_name, reset_num_timesteps):
            return super()._setup_learn(
                total_timesteps, callback, reset_num_timesteps, tb_log_name, progress_bar
            )

    def learn(self, *args: Any, **kwargs: Any) -> DQN:
        """SB3's ``learn``, then, with distillation on, a last round on the final values."""
        super().learn(*args, **kwargs)
        if self.distill_interval and self.distill_final_steps and len(self.replay_buffer):
            loss = self.distill(steps=self.distill_final_steps)
            self.logger.record("train/distill_loss_final", loss)
            self.logger.dump(self.num_timesteps)
        return self

    def distill(self, steps: int | None = None, batch_size: int | None = None) -> float:
        """Move the LoRA policy towards the values' posterior on replayed observations
        (:mod:`gym_llm.rl.dqn.distill`); the last step's cross-entropy."""
        return distill_steps(
            self, steps or self.distill_steps, batch_size or self.distill_batch_size,
            self._sample_rng,
        )  # fmt: skip

    def _get_torch_save_params(self) -> tuple[list[str], list[str]]:
        return ["q_net", "q_net_target", "q_net_average", "q_optimizer"], []

    # --- save / load (format gym_llm.DQN/1; the replay buffer is not saved) ---------------------

    def saved_config(self) -> SavedConfig:
        hyper: dict[str, Any] = {}
        for name in DQN_HYPERPARAMETERS:
            value = getattr(self, name)
            if name == "train_freq" and hasattr(value, "frequency"):  # SB3's TrainFreq
                value = [value.frequency, value.unit.value]
            if callable(value):
                continue  # a schedule: not JSON; load() takes the constructor's default
            hyper[name] = value
        return SavedConfig.of(self, hyper, DQN_FORMAT)

    def save(  # type: ignore[override]
        self,
        path: str | os.PathLike[str],
        exclude: Any = None,
        include: Any = None,
        *,
        extra_json: Mapping[str, Any] | None = None,
    ) -> None:
        """Write ``config.json`` + ``policy.pt`` (never a pickled object; the base weights only
        when nothing else names them: ``base_model/``), plus a JSON file for each ``extra_json``
        entry. A failed save leaves the previous checkpoint at ``path`` intact; ``agent.zip``
        (SB3's spelling) writes the directory ``agent``."""
        tensors: dict[str, Any] = {
            "q_net": self.q_net.state_dict(),
            "q_net_target": self.q_net_target.state_dict(),
            "q_net_average": self.q_net_average.state_dict(),
            "q_optimizer": self.q_optimizer.state_dict(),
            "trainable": self.policy.trainable_state_dict(),
            "optimizer": self.policy.optimizer.state_dict(),
        }
        if self.policy.choice_calibration is not None:
            tensors["choice_calibration"] = self.policy.choice_calibration.cpu()
        config = {"config.json": self.saved_config().to_json()}
        write_agent_directory(path, config, tensors, extra_json, base_model_writer(self.policy))
        self.last_checkpoint = agent_path(path)

    @classmethod
    def load(  # type: ignore[override]
        cls: type[SelfDQN],
        path: str | os.PathLike[str],
        env: Any = None,
        device: torch.device | str = "auto",
        **kwargs: Any,
    ) -> SelfDQN:
        """Rebuild an agent saved by :meth:`save`; ``env`` is optional (needed to keep training)."""
        saved = SavedConfig.read(path, DQN_FORMAT, DQN_HYPERPARAMETERS)
        hyper = {**saved.dqn_constructor_kwargs(), **kwargs}
        if isinstance(hyper.get("train_freq"), list):
            hyper["train_freq"] = tuple(hyper["train_freq"])
        policy_kwargs = saved.load_policy_kwargs()
        if env is None:
            model = cls(
                LLMPolicy, None, policy_kwargs=policy_kwargs, device=device,
                _init_setup_model=False, **hyper,
            )  # fmt: skip
            model.observation_space, model.action_space = saved.spaces()
            model.n_envs = 1
            model._setup_model()
        else:
            check_text_env(env)
            actions = getattr(env.action_space, "actions", None)
            if saved.action_space["actions"] != (list(actions or []) or None):
                raise ValueError(
                    f"The env's actions {actions} differ from the saved agent's "
                    f"{saved.action_space['actions']}."
                )
            model = cls(LLMPolicy, env, policy_kwargs=policy_kwargs, device=device, **hyper)
        model.load_policy_state(path)
        return model

    def load_policy_state(self, path: str | os.PathLike[str]) -> None:
        """Load what a :meth:`save` directory holds (values, target values, optimizers, adapter,
        counters) into this already-built agent; its replay buffer starts empty (module doc)."""
        saved = SavedConfig.read(path, DQN_FORMAT, DQN_HYPERPARAMETERS)
        state = read_tensors(path, self.device)
        try:
            self.q_net.load_state_dict(state["q_net"])
            self.q_net_target.load_state_dict(state["q_net_target"])
            # agents saved before the averaged head acted with the online one
            self.q_net_average.load_state_dict(state.get("q_net_average", state["q_net"]))
            self.q_optimizer.load_state_dict(state["q_optimizer"])
            self.policy.load_trainable_state_dict(state["trainable"])
            self.policy.optimizer.load_state_dict(state["optimizer"])
        except (KeyError, ValueError, RuntimeError) as exc:
            raise CheckpointError(
                f"{Path(path) / 'policy.pt'} does not fit this agent: build it with the saved "
                f"settings (DQN.load reads them from config.json). ({type(exc).__name__}: {exc})"
            ) from None
        if "choice_calibration" in state:
            self.policy.choice_calibration = state["choice_calibration"].to(self.device)
        self.num_timesteps, self._n_updates = int(saved.num_timesteps), int(saved.n_updates)
