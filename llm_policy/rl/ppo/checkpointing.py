"""``PPO.save`` and loading a saved PPO into a built agent: the directory format of
:mod:`gym_llm.rl.common.checkpoint` (``config.json`` + ``policy.pt`` + ``training_state.json``),
with PPO's hyper-parameters, its running advantage scale and its optimizer's parameter groups.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gym_llm.rl.common.base_model import base_model_writer
from gym_llm.rl.common.checkpoint import (
    SAVED_HYPERPARAMETERS,
    TRAINING_STATE,
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
from gym_llm.rl.ppo.training_state import TrainingState


def regroup_optimizer_state(
    saved: dict[str, Any], optimizer: torch.optim.Optimizer
) -> dict[str, Any]:
    """A saved optimizer state laid out in ``optimizer``'s parameter groups.

    Agents saved before the heads had groups of their own hold fewer groups (one, or the LM's
    weights with the action head, then the value head) whose parameters are, in order, the LM's,
    the action head's and the value head's: the order of today's groups, so the state carries
    over index for index.
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


class PPOCheckpointing(TrainingState):
    """``save`` and loading the trained state into a built agent (``PPO.load`` builds it)."""

    def _saved_hyperparameters(self) -> dict[str, Any]:
        hyper = {
            k: getattr(self, k) for k in SAVED_HYPERPARAMETERS if not callable(getattr(self, k))
        }
        if getattr(self, "ent_coef_auto", False):  # adaptive: it resumes from where it got to
            hyper["ent_coef"] = f"auto_{self.ent_coef}"
        return hyper

    def saved_config(self) -> SavedConfig:
        """What ``config.json`` records: hyper-parameters, the policy's settings in effect, the
        counters and the spaces."""
        observation_space, action_space = space_records(self.observation_space, self.action_space)
        return SavedConfig(
            hyperparameters=self._saved_hyperparameters(),
            policy_kwargs=recorded_policy_kwargs(self.policy, self.policy_kwargs),
            num_timesteps=self.num_timesteps,
            n_updates=self._n_updates,
            observation_space=observation_space,
            action_space=action_space,
        )

    def _optimizer_state(self) -> dict[str, Any]:
        return self.policy.optimizer.state_dict()

    def _tensors(self) -> dict[str, torch.Tensor | dict[str, Any]]:
        scale = self.advantage_scale
        tensors: dict[str, torch.Tensor | dict[str, Any]] = {
            "trainable": self.policy.trainable_state_dict(),
            "optimizer": self._optimizer_state(),
            "advantage_scale": torch.tensor(
                [float(scale.mean), float(scale.var), float(scale.count)], dtype=torch.float64
            ),
        }
        if self.policy.choice_calibration is not None:
            tensors["choice_calibration"] = self.policy.choice_calibration.cpu()
        return tensors

    def save(  # type: ignore[override]
        self,
        path: str | os.PathLike[str],
        exclude: Any = None,
        include: Any = None,
        *,
        extra_json: Mapping[str, Any] | None = None,
    ) -> None:
        """Write a directory: ``config.json`` + ``policy.pt`` (adapter, value head, optimizer),
        plus a JSON file for each ``extra_json`` entry (``Agent.save`` adds ``agent.json``).

        Never a pickled model or tokenizer; the base weights only when nothing else names them
        (a model object with no name or path: ``base_model/``, loaded back from there).
        ``agent.zip`` (SB3's spelling) writes the directory ``agent``. The directory is written next
        to ``path`` and renamed into place, so a failed save leaves the previous checkpoint intact.
        """
        texts = {
            "config.json": self.saved_config().to_json(),
            TRAINING_STATE: json.dumps(self.training_state(), default=float),
        }
        write_agent_directory(
            path, texts, self._tensors(), extra_json, base_model_writer(self.policy)
        )
        self.last_checkpoint = agent_path(path)

    def load_policy_state(self, path: str | os.PathLike[str]) -> None:
        """Load the trained state a :meth:`save` directory holds (adapter, value head, optimizer,
        counters, and the random state a resumed :meth:`learn` continues from) into this
        already-built agent; shared by ``PPO.load`` and ``Agent.load``."""
        saved = SavedConfig.read(path)
        state = read_tensors(path, self.device)
        try:
            self.policy.load_trainable_state_dict(state["trainable"])
            optimizer_state = regroup_optimizer_state(state["optimizer"], self.policy.optimizer)
            self.policy.optimizer.load_state_dict(optimizer_state)
        except (ValueError, RuntimeError) as exc:
            lora = saved.policy_kwargs.get("lora") or {}
            raise CheckpointError(
                f"{Path(path) / 'policy.pt'} does not fit this policy: it was saved for model "
                f"{saved.policy_kwargs.get('model')!r} with LoRA rank {lora.get('r')} and "
                f"trainable layers {saved.policy_kwargs.get('trainable_layers')}; this policy "
                f"is {self.policy.model_name!r} with LoRA rank "
                f"{(self.policy.lora_settings or {}).get('r')} and trainable layers "
                f"{self.policy.trainable_layers}. Build the agent with the saved settings "
                f"(PPO.load reads them from config.json). ({exc})"
            ) from None
        if "choice_calibration" in state:  # exactly the constants the agent trained with
            self.policy.choice_calibration = state["choice_calibration"].to(self.device)
        if "advantage_scale" in state:  # agents saved before it existed start a fresh one
            mean, var, count = state["advantage_scale"].tolist()
            self.advantage_scale.mean = np.asarray(mean, dtype=np.float64)
            self.advantage_scale.var = np.asarray(var, dtype=np.float64)
            self.advantage_scale.count = count
        self.num_timesteps = int(saved.num_timesteps)
        self._n_updates = int(saved.n_updates)
        training_file = agent_path(path) / TRAINING_STATE
        if training_file.is_file():  # agents saved before it existed resume with fresh RNGs
            try:
                self.restore_training_state(json.loads(training_file.read_text()))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise CheckpointError(
                    f"{training_file} is damaged ({type(exc).__name__}: {exc}). Load an earlier "
                    "checkpoint, or delete the file to continue with fresh random state."
                ) from None
