"""The saved-agent format, read and written in one place: ``config.json`` (JSON only),
``policy.pt`` (tensors only, loaded with ``weights_only=True``) and ``training_state.json`` (the
random state a resumed run continues from), in a directory that is written next to its target
and renamed into place, so a failed save leaves the previous one intact
(:mod:`gym_llm.rl.common.checkpoint_files`).

``PPO.save``/``PPO.load`` and ``Agent.save``/``Agent.load`` both go through :class:`SavedConfig`,
so the format is parsed by one piece of code, and refused with a :class:`CheckpointError` that
names the file when it is damaged, foreign or newer.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

from gym_llm.rl.common.base_model import BASE_MODEL_MARKER, needs_base_model, resolve_model
from gym_llm.rl.common.checkpoint_files import CheckpointError, agent_path
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
    "target_entropy_of",
    "min_action_prob",
    "floor_mode",
    "floor_balance",
    "policy_update",
    "kl_step",
    "micro_batch_size",
    "n_logged_samples",
    "seed",
    "advantage_estimator",
    "q_n_steps",
    "q_cut",
    "q_replay_ratio",
    "q_replay_balance",
    "q_fit",
    "q_gamma",
    "q_huber_delta",
    "clip_range_vf",
    "reward_scale",
    "critic_warmup_steps",
    "max_consecutive_skips",
)


#: How a PPO saved before a hyper-parameter existed trained, so it loads as it was (``q_gamma``:
#: ``gamma``): every hyper-parameter saved since the first format. Fixed once written: a later
#: default does not change what older agents did.
PPO_BEFORE_ADDED: dict[str, Any] = {
    "target_entropy": None,
    "target_entropy_of": "state",
    "min_action_prob": 0.0,  # no floor
    "floor_mode": "barrier",
    "floor_balance": 0.0,  # the floor shared evenly
    "policy_update": "clip",
    "kl_step": 0.05,
    "advantage_estimator": "gae",
    "q_n_steps": 1,
    "q_cut": 0.0,  # Watkins' cut
    "q_replay_ratio": 8.0,
    "q_replay_balance": 0.0,  # every step alike
    "q_fit": "td",  # the head trained by TD steps
    "q_huber_delta": 1.0,  # SB3's Huber loss
    "clip_range_vf": None,
    "reward_scale": 1.0,
    "critic_warmup_steps": 0,
    "max_consecutive_skips": 10,
}

#: The ``format`` field of a saved DQN's ``config.json``.
DQN_FORMAT = "gym_llm.DQN/1"

#: Constructor arguments written to ``config.json`` and passed back by ``load``.
DQN_HYPERPARAMETERS = (
    "learning_rate",
    "learning_rate_decay",
    "buffer_size",
    "learning_starts",
    "batch_size",
    "tau",
    "gamma",
    "train_freq",
    "gradient_steps",
    "n_steps",
    "target_update_interval",
    "average_tau",
    "exploration_fraction",
    "exploration_initial_eps",
    "exploration_final_eps",
    "max_grad_norm",
    "alpha",
    "beta",
    "q_width",
    "huber_delta",
    "distill_interval",
    "distill_steps",
    "distill_final_steps",
    "distill_batch_size",
    "distill_learning_rate",
)


#: How a DQN saved before a hyper-parameter existed trained, so it loads as it was: every
#: hyper-parameter saved since the first format. Fixed once written: a later default does not
#: change what older agents did.
DQN_BEFORE_ADDED: dict[str, Any] = {
    "learning_rate_decay": 0,  # a constant rate
    "average_tau": 1.0,  # no averaged head
    "huber_delta": 1.0,  # SB3's Huber loss
    "distill_interval": 0,
    "distill_steps": 4,
    "distill_final_steps": 0,  # no last round on the final values
    "distill_batch_size": 32,
    "distill_learning_rate": 5e-4,
}


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
    #: Where the config was read from (not written): ``./base_model`` resolves against it.
    directory: Path = field(default=Path(), repr=False, compare=False)

    @classmethod
    def read(
        cls,
        directory: str | os.PathLike[str],
        expected_format: str = FORMAT,
        known_hyperparameters: tuple[str, ...] = SAVED_HYPERPARAMETERS,
    ) -> SavedConfig:
        """The config of a saved agent directory, with an error that says what to do if it is
        not one, is damaged, or was written by a newer gym_llm."""
        directory = agent_path(directory)
        config_file = directory / "config.json"
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
        config = cls(**data)
        config.directory = directory
        return config

    @classmethod
    def of(cls, algo: Any, hyperparameters: dict[str, Any], format: str = FORMAT) -> SavedConfig:
        """The record of a built algorithm: its ``hyperparameters``, its policy's settings in
        effect, its counters and its spaces."""
        observation_space, action_space = space_records(algo.observation_space, algo.action_space)
        return cls(
            hyperparameters=hyperparameters,
            policy_kwargs=recorded_policy_kwargs(algo.policy, algo.policy_kwargs),
            num_timesteps=algo.num_timesteps,
            n_updates=algo._n_updates,
            observation_space=observation_space,
            action_space=action_space,
            format=format,
        )

    def to_json(self) -> str:
        record = {k: v for k, v in asdict(self).items() if k != "directory"}
        return json.dumps(record, indent=2, default=str)

    def constructor_kwargs(self) -> dict[str, Any]:
        """The hyper-parameters as ``PPO(...)`` takes them; a setting the agent was saved
        without, the value it trained with (:data:`PPO_BEFORE_ADDED`)."""
        hyper = dict(self.hyperparameters)
        hyper["clip_range"] = hyper.pop("clip_range_value")
        # before q_gamma existed, action values were discounted by gamma
        older = PPO_BEFORE_ADDED | {"q_gamma": hyper.get("gamma", 0.99)}
        return {**older, **hyper}

    def dqn_constructor_kwargs(self) -> dict[str, Any]:
        """The hyper-parameters as ``DQN(...)`` takes them; a setting the agent was saved
        without, the value it trained with (:data:`DQN_BEFORE_ADDED`)."""
        return {**DQN_BEFORE_ADDED, **self.hyperparameters}

    def load_policy_kwargs(self) -> dict[str, Any]:
        """``policy_kwargs`` that rebuild the saved policy."""
        # Agents saved before trainable_layers existed trained every layer; before the action
        # head and the calibration were on by default, a policy saved without them had neither;
        # before replies were constrained by default, generate mode wrote free text.
        old = {
            "trainable_layers": None,
            "action_head": False,
            "choice_calibration": False,
            "reply_constraint": "off",
        }
        kwargs = {**old, **self.policy_kwargs}
        kwargs["model"] = resolve_model(kwargs.get("model"), self.directory)
        if isinstance(kwargs.get("optimizer_class"), str):
            kwargs["optimizer_class"] = resolve_class(kwargs["optimizer_class"])
        return kwargs

    def spaces(self) -> tuple[TextObservations, TextActions]:
        """The spaces the agent was trained on (to query it without an env)."""
        obs, act = self.observation_space, self.action_space
        return (
            TextObservations(obs["max_length"], instruction=obs["instruction"]),
            TextActions(
                act["actions"],
                description=act["description"],
                max_length=act["max_length"],
                per_state=bool(act.get("per_state", False)),
                pattern=act.get("pattern"),
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
            "per_state": bool(getattr(act_space, "per_state", False)),
            "description": getattr(act_space, "description", None),
            "max_length": getattr(act_space, "max_length", None),
            "pattern": getattr(act_space, "pattern", None),
        },
    )


def recorded_policy_kwargs(policy: Any, policy_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The ``LLMPolicy`` keyword arguments a saved agent records: the settings in effect (the
    default LoRA included), so a later change of a default cannot change what it rebuilds."""
    config = policy_kwargs.get("config")
    if config is not None:  # a PolicyConfig: its fields, with the keywords given beside it
        values = {f.name: getattr(config, f.name) for f in fields(config)}
        policy_kwargs = {**values, **{k: v for k, v in policy_kwargs.items() if k != "config"}}
    recorded = {k: v for k, v in policy_kwargs.items() if k not in ("lora", "tokenizer")}
    if needs_base_model(policy.model_name):
        # Nothing names the base model: it is saved with the agent (base_model.py).
        recorded["model"] = BASE_MODEL_MARKER
    elif not isinstance(recorded.get("model"), str):
        # The default model (no "model" key) or a model object: record the name in effect, so
        # loading rebuilds the same model whatever the default is then.
        recorded["model"] = policy.model_name
    recorded["lora"] = policy.lora_settings
    recorded["trainable_layers"] = policy.trainable_layers
    recorded["conversation"] = policy.conversation
    recorded["action_head"] = policy.action_head is not None
    recorded["choice_calibration"] = policy.calibrated
    recorded["reply_constraint"] = policy.reply_constraint
    if "optimizer_class" in recorded:  # a class: saved as its import path
        cls = recorded["optimizer_class"]
        recorded["optimizer_class"] = f"{cls.__module__}:{cls.__qualname__}"
    return recorded


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
