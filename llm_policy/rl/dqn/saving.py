"""``DQN.save`` / ``DQN.load``: the saved-agent directory of :mod:`gym_llm.rl.common.checkpoint`, format
``gym_llm.DQN/1``: ``config.json`` (hyper-parameters, the policy's settings in effect, counters,
spaces) and ``policy.pt`` (tensors only: the Q head, its target copy, their optimizer, the LoRA
adapter with its optimizer, and the calibration), written next to its target and renamed into place.

The replay buffer is not saved: it holds strings of every step (hundreds of MB on long runs) and
a resumed run refills it. Until it holds ``learning_starts`` steps again, ``learn`` collects
without training, acting with the saved values (not uniformly: the counters are restored).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import torch

from gym_llm.policy.q_head import QHead
from gym_llm.rl.common.base_model import base_model_writer
from gym_llm.rl.common.checkpoint import (
    SavedConfig,
    recorded_policy_kwargs,
    space_records,
)
from gym_llm.rl.common.checkpoint_files import (
    CheckpointError,
    agent_path,
    read_tensors,
    write_agent_directory,
)
from gym_llm.rl.common.vec_env import check_text_env

#: The ``format`` field of a saved DQN's ``config.json``.
DQN_FORMAT = "gym_llm.DQN/1"

#: Constructor arguments written to ``config.json`` and passed back by ``load``.
DQN_HYPERPARAMETERS = (
    "learning_rate",
    "buffer_size",
    "learning_starts",
    "batch_size",
    "tau",
    "gamma",
    "train_freq",
    "gradient_steps",
    "n_steps",
    "target_update_interval",
    "exploration_fraction",
    "exploration_initial_eps",
    "exploration_final_eps",
    "max_grad_norm",
    "alpha",
    "beta",
    "q_width",
    "distill_interval",
    "distill_steps",
    "distill_final_steps",
    "distill_batch_size",
    "distill_learning_rate",
)

SelfDQN = TypeVar("SelfDQN", bound="DQNSaving")


class DQNSaving:
    """Saving and loading for :class:`gym_llm.DQN` (a mixin: it reads the agent's attributes)."""

    policy: Any
    policy_kwargs: dict[str, Any]
    q_net: QHead
    q_net_target: QHead
    q_optimizer: torch.optim.Optimizer
    observation_space: Any
    action_space: Any
    num_timesteps: int
    _n_updates: int
    device: torch.device
    n_envs: int
    last_checkpoint: Path | None = None

    def saved_config(self) -> SavedConfig:
        hyper: dict[str, Any] = {}
        for name in DQN_HYPERPARAMETERS:
            value = getattr(self, name)
            if name == "train_freq" and hasattr(value, "frequency"):  # SB3's TrainFreq
                value = [value.frequency, value.unit.value]
            if callable(value):
                continue  # a schedule: not JSON; load() takes the constructor's default
            hyper[name] = value
        observation_space, action_space = space_records(self.observation_space, self.action_space)
        return SavedConfig(
            hyperparameters=hyper,
            policy_kwargs=recorded_policy_kwargs(self.policy, self.policy_kwargs),
            num_timesteps=self.num_timesteps,
            n_updates=self._n_updates,
            observation_space=observation_space,
            action_space=action_space,
            format=DQN_FORMAT,
        )

    def save(
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
    def load(
        cls: type[SelfDQN],
        path: str | os.PathLike[str],
        env: Any = None,
        device: torch.device | str = "auto",
        **kwargs: Any,
    ) -> SelfDQN:
        """Rebuild an agent saved by :meth:`save`; ``env`` is optional (needed to keep training)."""
        from gym_llm.policy.llm_policy import LLMPolicy

        saved = SavedConfig.read(path, DQN_FORMAT, DQN_HYPERPARAMETERS)
        hyper = {**saved.hyperparameters, **kwargs}
        if isinstance(hyper.get("train_freq"), list):
            hyper["train_freq"] = tuple(hyper["train_freq"])
        policy_kwargs = saved.load_policy_kwargs()
        if env is None:
            model = cls(  # type: ignore[call-arg]
                LLMPolicy, None, policy_kwargs=policy_kwargs, device=device,
                _init_setup_model=False, **hyper,
            )  # fmt: skip
            model.observation_space, model.action_space = saved.spaces()
            model.n_envs = 1
            model._setup_model()  # type: ignore[attr-defined]
        else:
            check_text_env(env)
            actions = getattr(env.action_space, "actions", None)
            if saved.action_space["actions"] != (list(actions or []) or None):
                raise ValueError(
                    f"The env's actions {actions} differ from the saved agent's "
                    f"{saved.action_space['actions']}."
                )
            model = cls(LLMPolicy, env, policy_kwargs=policy_kwargs, device=device, **hyper)  # type: ignore[call-arg]
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
