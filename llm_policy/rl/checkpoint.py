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

import torch

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
