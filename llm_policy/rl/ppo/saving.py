"""What a saved PPO agent's ``policy.pt`` holds, and loading it back into a built agent.

The directory's format (``config.json``, the atomic write, ``training_state.json``) is
:mod:`gym_llm.rl.common.checkpoint`'s, shared with DQN; this module is PPO's part of it: the
adapter, value head and optimizer, the advantage scale, the choice calibration and the action
values of ``advantage_estimator="q"``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from gym_llm.rl.common.checkpoint import TRAINING_STATE, SavedConfig, regroup_optimizer_state
from gym_llm.rl.common.checkpoint_files import CheckpointError, agent_path, read_tensors

if TYPE_CHECKING:
    from gym_llm.rl.ppo.ppo import PPO


def agent_tensors(model: PPO) -> dict[str, torch.Tensor | dict[str, Any]]:
    """The tensors of ``policy.pt``: what training changed, keyed by part."""
    scale = model.advantage_scale
    tensors: dict[str, torch.Tensor | dict[str, Any]] = {
        "trainable": model.policy.trainable_state_dict(),
        "optimizer": model.parallel.optimizer_state(model.policy),
        "advantage_scale": torch.tensor(
            [float(scale.mean), float(scale.var), float(scale.count)], dtype=torch.float64
        ),
    }
    if model.policy.choice_calibration is not None:
        tensors["choice_calibration"] = model.policy.choice_calibration.cpu()
    if model.q_critic is not None:
        tensors["q_critic"] = model.q_critic.state_dict()
    return tensors


def load_trained_state(model: PPO, path: str | os.PathLike[str]) -> None:
    """Load a saved directory's trained state into ``model`` (built with the saved settings):
    the tensors of :func:`agent_tensors`, the counters, and the random state a resumed
    ``learn`` continues from.

    Raises:
        CheckpointError: the tensors do not fit the policy, or the training state is damaged.
    """
    saved = SavedConfig.read(path)
    state = read_tensors(path, model.device)
    policy = model.policy
    try:
        policy.load_trainable_state_dict(state["trainable"])
        policy.optimizer.load_state_dict(
            regroup_optimizer_state(state["optimizer"], policy.optimizer)
        )
    except (ValueError, RuntimeError) as exc:
        lora = saved.policy_kwargs.get("lora") or {}
        raise CheckpointError(
            f"{Path(path) / 'policy.pt'} does not fit this policy: it was saved for model "
            f"{saved.policy_kwargs.get('model')!r} with LoRA rank {lora.get('r')} and "
            f"trainable layers {saved.policy_kwargs.get('trainable_layers')}; this policy "
            f"is {policy.model_name!r} with LoRA rank "
            f"{(policy.lora_settings or {}).get('r')} and trainable layers "
            f"{policy.trainable_layers}. Build the agent with the saved settings "
            f"(PPO.load reads them from config.json). ({exc})"
        ) from None
    if "choice_calibration" in state:  # exactly the constants the agent trained with
        policy.choice_calibration = state["choice_calibration"].to(model.device)
    if model.q_critic is not None:  # with its replay, where the envs match (QCritic)
        if "q_critic" not in state:
            raise CheckpointError(
                f"{Path(path) / 'policy.pt'} holds no action values: it was saved by an "
                "agent with another advantage_estimator. Load it with the saved settings."
            )
        model.q_critic.load_state_dict(state["q_critic"])
    if "advantage_scale" in state:  # agents saved before it existed start a fresh one
        mean, var, count = state["advantage_scale"].tolist()
        model.advantage_scale.mean = np.asarray(mean, dtype=np.float64)
        model.advantage_scale.var = np.asarray(var, dtype=np.float64)
        model.advantage_scale.count = count
    model.num_timesteps = int(saved.num_timesteps)
    model._n_updates = int(saved.n_updates)
    training_file = agent_path(path) / TRAINING_STATE
    if training_file.is_file():  # agents saved before it existed resume with fresh RNGs
        try:
            model.restore_training_state(json.loads(training_file.read_text()))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(
                f"{training_file} is damaged ({type(exc).__name__}: {exc}). Load an earlier "
                "checkpoint, or delete the file to continue with fresh random state."
            ) from None
