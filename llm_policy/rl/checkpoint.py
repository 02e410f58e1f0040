"""The saved-agent format, read and written in one place: ``config.json`` (JSON only),
``policy.pt`` (tensors only, loaded with ``weights_only=True``) and ``training_state.json`` (the
random state a resumed run continues from), in a directory that is written next to its target
and renamed into place, so a failed save leaves the previous one intact
(:mod:`gym_llm.rl.checkpoint_files`).

``PPO.save``/``PPO.load`` and ``Agent.save``/``Agent.load`` both go through :class:`SavedConfig`,
so the format is parsed by one piece of code, and refused with a :class:`CheckpointError` that
names the file when it is damaged, foreign or newer.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gym_llm.rl.checkpoint_files import (
    CheckpointError,
    read_tensors,
    write_directory,
)
from gym_llm.rl.training_state import TrainingState
from gym_llm.spaces import TextActions, TextObservations

#: The file of a checkpoint that holds the run's random state and episode bookkeeping (JSON).
TRAINING_STATE = "training_state.json"

#: The ``format`` field of ``config.json``.
FORMAT = "gym_llm.PPO/1"


def check_format(found: str, config_file: Path, expected: str = FORMAT) -> None:
    """Refuse a config of another kind, or of a newer version of this format."""
    kind, _, version = found.rpartition("/")
    own_kind, _, own_version = expected.rpartition("/")
    if kind != own_kind:
        algo = own_kind.rpartition(".")[2]
        other = kind.rpartition(".")[2]
        hint = (
            f" but a {other} agent: load it with gym_llm.{other}"
            if kind.startswith("gym_llm.")
            else ""
        )
        raise CheckpointError(
            f"{config_file} has format {found!r}, not {expected!r}: it is not a saved gym_llm "
            f"{algo} agent{hint}."
        )
    if not version.isdigit() or int(version) > int(own_version):
        raise CheckpointError(
            f"{config_file} was written in format {found!r} by a newer gym_llm; this one reads "
            f"{expected!r}. Upgrade gym_llm (pip install -U gym_llm) to load it."
        )


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
    "target_entropy",
    "policy_update",
    "kl_step",
    "micro_batch_size",
    "n_logged_samples",
    "seed",
    "advantage_estimator",
    "clip_range_vf",
    "reward_scale",
    "critic_warmup_steps",
    "max_consecutive_skips",
)


def resolve_class(path: str) -> type[Any]:
    """The class ``module:Qualified.Name`` names (written by ``save``), or the ``<class
    'module.Name'>`` text that agents saved before it hold."""
    import importlib

    if path.startswith("<class '") and path.endswith("'>"):
        module, _, name = path[len("<class '") : -2].rpartition(".")
    else:
        module, _, name = path.partition(":")
    try:
        found: Any = importlib.import_module(module)
        for part in name.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError, ValueError):
        raise CheckpointError(
            f"The saved optimizer_class {path!r} cannot be imported here: install what defines "
            "it, or name an importable one in config.json (module:Name)."
        ) from None
    return found  # type: ignore[no-any-return]


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
    def read(
        cls,
        directory: str | os.PathLike[str],
        expected_format: str = FORMAT,
        known_hyperparameters: tuple[str, ...] = SAVED_HYPERPARAMETERS,
    ) -> SavedConfig:
        """The config of a saved agent directory, with an error that says what to do if it is
        not one, is damaged, or was written by a newer gym_llm."""
        config_file = Path(directory) / "config.json"
        if not config_file.is_file():
            raise FileNotFoundError(
                f"{directory} is not a gym_llm agent directory (no config.json); save one with "
                "model.save(path)."
            )
        try:
            data = json.loads(config_file.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CheckpointError(
                f"{config_file} is not valid JSON ({exc}): the file is damaged. Load an earlier "
                "checkpoint (run_dir/checkpoints/) or the run's agent/ directory."
            ) from None
        if not isinstance(data, dict):
            raise CheckpointError(f"{config_file} holds {type(data).__name__}, not a JSON object.")
        check_format(str(data.get("format", FORMAT)), config_file, expected_format)
        unknown = sorted(set(data) - set(cls.__dataclass_fields__))
        unknown += sorted(
            f"hyperparameters.{k}"
            for k in data.get("hyperparameters", {})
            if k not in known_hyperparameters
        )
        if unknown:
            raise CheckpointError(
                f"{config_file} has keys this gym_llm does not know: {unknown}. It was written "
                "by a newer gym_llm (upgrade: pip install -U gym_llm) or edited by hand (remove "
                "them)."
            )
        required = [
            name
            for name, item in cls.__dataclass_fields__.items()
            if item.default is MISSING and name not in data
        ]
        if required:
            raise CheckpointError(f"{config_file} lacks {required}: the file is incomplete.")
        return cls(**data)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, default=str)

    def constructor_kwargs(self) -> dict[str, Any]:
        """The hyper-parameters as ``PPO(...)`` takes them."""
        hyper = dict(self.hyperparameters)
        hyper["clip_range"] = hyper.pop("clip_range_value")
        return hyper

    def load_policy_kwargs(self) -> dict[str, Any]:
        """``policy_kwargs`` that rebuild the saved policy."""
        # Agents saved before trainable_layers existed trained every layer; before the action
        # head and the calibration were on by default, a policy saved without them had neither.
        old = {"trainable_layers": None, "action_head": False, "choice_calibration": False}
        kwargs = {**old, **self.policy_kwargs}
        if isinstance(kwargs.get("optimizer_class"), str):
            kwargs["optimizer_class"] = resolve_class(kwargs["optimizer_class"])
        return kwargs

    def spaces(self) -> tuple[TextObservations, TextActions]:
        """The spaces the agent was trained on (to query it without an env)."""
        obs, act = self.observation_space, self.action_space
        return (
            TextObservations(obs["max_length"], instruction=obs["instruction"]),
            TextActions(
                act["actions"], description=act["description"], max_length=act["max_length"]
            ),
        )


def space_records(obs_space: Any, act_space: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The text spaces as ``config.json`` records them (:meth:`SavedConfig.spaces` rebuilds)."""
    actions = getattr(act_space, "actions", None)
    return (
        {
            "max_length": getattr(obs_space, "max_length", None),
            "instruction": getattr(obs_space, "instruction", None),
        },
        {
            "actions": list(actions) if actions else None,
            "description": getattr(act_space, "description", None),
            "max_length": getattr(act_space, "max_length", None),
        },
    )


def recorded_policy_kwargs(policy: Any, policy_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The ``LLMPolicy`` keyword arguments a saved agent records: the settings in effect (the
    default LoRA included), so a later change of a default cannot change what it rebuilds."""
    recorded = {k: v for k, v in policy_kwargs.items() if k not in ("lora", "tokenizer")}
    if not isinstance(recorded.get("model", ""), str):
        # Built from a model object: record where it came from, so load() can rebuild it.
        if not policy.model_name:
            raise ValueError(
                "This agent's policy was built from a model object with no name_or_path, so "
                "a saved agent could not be rebuilt. Save the model first with "
                "model.save_pretrained(DIR) and tokenizer.save_pretrained(DIR), then build "
                "the agent with model=DIR."
            )
        recorded["model"] = policy.model_name
    recorded["lora"] = policy.lora_settings
    recorded["trainable_layers"] = policy.trainable_layers
    recorded["conversation"] = policy.conversation
    recorded["action_head"] = policy.action_head is not None
    recorded["choice_calibration"] = policy.choice_calibration is not None
    if "optimizer_class" in recorded:  # a class: saved as its import path
        cls = recorded["optimizer_class"]
        recorded["optimizer_class"] = f"{cls.__module__}:{cls.__qualname__}"
    return recorded


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

        Never the base weights, never a pickled model or tokenizer. The directory is written next
        to ``path`` and renamed into place, so a failed save leaves the previous checkpoint intact.
        """
        texts = {
            "config.json": self.saved_config().to_json(),
            TRAINING_STATE: json.dumps(self.training_state(), default=float),
        }
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
        self.last_checkpoint = Path(path)

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
        training_file = Path(path) / TRAINING_STATE
        if training_file.is_file():  # agents saved before it existed resume with fresh RNGs
            try:
                self.restore_training_state(json.loads(training_file.read_text()))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise CheckpointError(
                    f"{training_file} is damaged ({type(exc).__name__}: {exc}). Load an earlier "
                    "checkpoint, or delete the file to continue with fresh random state."
                ) from None
