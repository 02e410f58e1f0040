"""The saved-agent format, read and written in one place: ``config.json`` (JSON only) plus
``policy.pt`` (tensors only, loaded with ``weights_only=True``), in a directory that is written
next to its target and renamed into place, so a failed save leaves the previous one intact.

``PPO.save``/``PPO.load`` and ``Agent.save``/``Agent.load`` both go through :class:`SavedConfig`,
so the format is parsed by one piece of code.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gym_llm.rl.update import PPOUpdate
from gym_llm.spaces import TextActions, TextObservations

#: The ``format`` field of ``config.json``.
FORMAT = "gym_llm.PPO/1"

#: Hyper-parameters written to ``config.json`` by ``save`` and passed back by ``load``.
SAVED_HYPERPARAMETERS = (
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


@dataclass
class SavedConfig:
    """``config.json`` of a saved agent."""

    #: :data:`SAVED_HYPERPARAMETERS` (``clip_range`` stored as ``clip_range_value``).
    hyperparameters: dict[str, Any]
    #: ``LLMPolicy`` keyword arguments as in effect (the LoRA settings, trainable layers).
    policy_kwargs: dict[str, Any]
    num_timesteps: int
    n_updates: int
    #: ``max_length`` and ``instruction`` of the observation space.
    observation_space: dict[str, Any]
    #: ``actions``, ``description`` and ``max_length`` of the action space.
    action_space: dict[str, Any]
    format: str = FORMAT

    @classmethod
    def read(cls, directory: str | os.PathLike[str]) -> SavedConfig:
        """The config of a saved agent directory, with an error that says what to do if it is
        not one."""
        config_file = Path(directory) / "config.json"
        if not config_file.is_file():
            raise FileNotFoundError(
                f"{directory} is not a gym_llm agent directory (no config.json); save one with "
                "model.save(path)."
            )
        data = json.loads(config_file.read_text())
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, default=str)

    def constructor_kwargs(self) -> dict[str, Any]:
        """The hyper-parameters as ``PPO(...)`` takes them."""
        hyper = dict(self.hyperparameters)
        hyper["clip_range"] = hyper.pop("clip_range_value")
        return hyper

    def load_policy_kwargs(self) -> dict[str, Any]:
        """``policy_kwargs`` that rebuild the saved policy."""
        # Agents saved before trainable_layers existed trained every layer.
        return {"trainable_layers": None, **self.policy_kwargs}

    def spaces(self) -> tuple[TextObservations, TextActions]:
        """The spaces the agent was trained on (to query it without an env)."""
        obs, act = self.observation_space, self.action_space
        return (
            TextObservations(obs["max_length"], instruction=obs["instruction"]),
            TextActions(
                act["actions"], description=act["description"], max_length=act["max_length"]
            ),
        )


def write_directory(
    path: str | os.PathLike[str], files: Mapping[str, Callable[[Path], None]]
) -> None:
    """Write a checkpoint directory all or nothing: each ``files[name](file_path)`` writes into a
    temporary sibling directory, which then replaces ``path`` (the old one is removed only after
    the new one is in place)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        for name, write in files.items():
            write(tmp / name)
        backup = target.with_name(f".{target.name}.old")
        if target.exists():
            os.replace(target, backup)
        os.replace(tmp, target)
        shutil.rmtree(backup, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def read_tensors(directory: str | os.PathLike[str], device: torch.device) -> dict[str, Any]:
    """``policy.pt``: tensors only (``weights_only=True``: no pickled object is ever run)."""
    state: dict[str, Any] = torch.load(
        Path(directory) / "policy.pt", map_location=device, weights_only=True
    )
    return state


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


class PPOCheckpointing(PPOUpdate):
    """``save`` and loading the trained state into a built agent (``PPO.load`` builds it)."""

    def saved_config(self) -> SavedConfig:
        """What ``config.json`` records: hyper-parameters, the policy's settings in effect, the
        counters and the spaces."""
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
        policy_kwargs["trainable_layers"] = self.policy.trainable_layers
        policy_kwargs["conversation"] = self.policy.conversation
        actions = getattr(act_space, "actions", None)
        return SavedConfig(
            hyperparameters={
                k: getattr(self, k) for k in SAVED_HYPERPARAMETERS if not callable(getattr(self, k))
            },
            policy_kwargs=policy_kwargs,
            num_timesteps=self.num_timesteps,
            n_updates=self._n_updates,
            observation_space={
                "max_length": getattr(obs_space, "max_length", None),
                "instruction": getattr(obs_space, "instruction", None),
            },
            action_space={
                "actions": list(actions) if actions else None,
                "description": getattr(act_space, "description", None),
                "max_length": getattr(act_space, "max_length", None),
            },
        )

    def _tensors(self) -> dict[str, torch.Tensor | dict[str, Any]]:
        scale = self.advantage_scale
        tensors: dict[str, torch.Tensor | dict[str, Any]] = {
            "trainable": self.policy.trainable_state_dict(),
            "optimizer": self.policy.optimizer.state_dict(),
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

        Never the base weights, never a pickled model or tokenizer. The directory is written next
        to ``path`` and renamed into place, so a failed save leaves the previous checkpoint intact.
        """
        texts = {"config.json": self.saved_config().to_json()}
        texts.update(
            {name: json.dumps(data, indent=2) for name, data in (extra_json or {}).items()}
        )
        tensors = self._tensors()

        def write(file: Path) -> None:
            if file.name == "policy.pt":
                torch.save(tensors, file)
            else:
                file.write_text(texts[file.name])

        write_directory(path, dict.fromkeys([*texts, "policy.pt"], write))

    def load_policy_state(self, path: str | os.PathLike[str]) -> None:
        """Load the trained state a :meth:`save` directory holds (adapter, value head, optimizer,
        counters) into this already-built agent; shared by :meth:`load` and ``Agent.load``."""
        saved = SavedConfig.read(path)
        state = read_tensors(path, self.device)
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
        self.num_timesteps = int(saved.num_timesteps)
        self._n_updates = int(saved.n_updates)
