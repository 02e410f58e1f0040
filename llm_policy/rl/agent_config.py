"""The Agent's settings: LlamaGym/TRL config names mapped onto gym_llm's, checked, and the
``agent.json`` a saved Agent adds to PPO's checkpoint directory."""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from gym_llm.rl.common.checkpoint import SavedConfig

#: ``generate_config`` keys the policy honours, with the LlamaGym/transformers meaning.
GENERATE_KEYS = ("max_new_tokens", "temperature", "do_sample")
#: Accepted but ignored: PPO needs the exact log-prob of each sampled token under the full
#: distribution, which top-p/top-k truncation would change.
_IGNORED_GENERATE_KEYS = ("top_p", "top_k")
#: Accepted silently: gym_llm takes pad and stop tokens from the tokenizer and generation config.
_SILENT_GENERATE_KEYS = ("pad_token_id", "eos_token_id")

#: ``ppo_config`` keys: TRL/LlamaGym names and gym_llm/SB3 names -> the setting they control.
#: ``batch_size`` keeps LlamaGym's meaning (episodes per update); ``mini_batch_size`` is turns per
#: optimizer step (PPO's ``batch_size``).
PPO_KEYS: dict[str, str] = {
    "batch_size": "episodes_per_update",
    "episodes_per_update": "episodes_per_update",
    "mini_batch_size": "mini_batch_size",
    "learning_rate": "learning_rate",
    "ppo_epochs": "n_epochs",
    "n_epochs": "n_epochs",
    "gamma": "gamma",
    "lam": "gae_lambda",
    "gae_lambda": "gae_lambda",
    "cliprange": "clip_range",
    "clip_range": "clip_range",
    "vf_coef": "vf_coef",
    "ent_coef": "ent_coef",
    "target_kl": "target_kl",
    "init_kl_coef": "kl_coef",
    "kl_coef": "kl_coef",
    "max_grad_norm": "max_grad_norm",
    "micro_batch_size": "micro_batch_size",
    "normalize_advantage": "normalize_advantage",
    "seed": "seed",
}
#: Defaults: LlamaGym's batch sizes (16 episodes, 16 turns), TRL's 4 epochs, gym_llm's LoRA rate.
_PPO_DEFAULTS: dict[str, Any] = {
    "episodes_per_update": 16,
    "mini_batch_size": 16,
    "learning_rate": None,  # PPO's: 5e-4 with LoRA, 1e-5 without
    "n_epochs": 4,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "clip_range": 0.2,
    "vf_coef": 0.5,
    "ent_coef": 0.0,
    "target_kl": None,
    "kl_coef": 0.0,
    "max_grad_norm": 1.0,
    "micro_batch_size": None,  # as many turns per pass as fit PPO's memory budget
    "normalize_advantage": True,
    "seed": None,
}
#: KL threshold used by ``use_target_kl=True`` when ``ppo_config`` sets no ``target_kl``.
DEFAULT_TARGET_KL = 0.1


def split_config(
    given: Mapping[str, Any] | None, known: Sequence[str], what: str
) -> dict[str, Any]:
    config = dict(given or {})
    unknown = sorted(k for k in config if k not in known)
    if unknown:
        raise ValueError(
            f"Unknown {what} key(s) {unknown}; known keys: {', '.join(sorted(known))}."
        )
    return config


def resolve_configs(
    generate_config: Mapping[str, Any] | None,
    generate_config_dict: Mapping[str, Any] | None,
    ppo_config: Mapping[str, Any] | None,
    ppo_config_dict: Mapping[str, Any] | None,
    use_target_kl: bool,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(generate settings, PPO settings by gym_llm name with defaults filled in)`` from the
    Agent's arguments (either spelling of each; unknown keys raise, top-p/top-k warn)."""
    if generate_config is not None and generate_config_dict is not None:
        raise ValueError("Pass generate_config or generate_config_dict, not both.")
    if ppo_config is not None and ppo_config_dict is not None:
        raise ValueError("Pass ppo_config or ppo_config_dict, not both.")
    generate = split_config(
        generate_config if generate_config is not None else generate_config_dict,
        (*GENERATE_KEYS, *_IGNORED_GENERATE_KEYS, *_SILENT_GENERATE_KEYS),
        "generate_config",
    )
    ignored = [k for k in _IGNORED_GENERATE_KEYS if k in generate]
    if ignored:
        warnings.warn(
            f"generate_config {ignored} ignored: PPO needs the exact log-prob of each sampled "
            "token under the full distribution, which top-p/top-k truncation would change. "
            "Use temperature to control sampling.",
            UserWarning,
            stacklevel=3,
        )
    given = split_config(
        ppo_config if ppo_config is not None else ppo_config_dict, tuple(PPO_KEYS), "ppo_config"
    )
    hyper = dict(_PPO_DEFAULTS)
    for key, value in given.items():
        hyper[PPO_KEYS[key]] = value
    if use_target_kl and hyper["target_kl"] is None:
        hyper["target_kl"] = DEFAULT_TARGET_KL
    for name in ("episodes_per_update", "mini_batch_size", "n_epochs", "micro_batch_size"):
        if hyper[name] is not None and int(hyper[name]) < 1:
            raise ValueError(f"ppo_config {name} must be >= 1, got {hyper[name]}.")
    return generate, hyper


def agent_json(agent: Any) -> dict[str, Any]:
    """``agent.json``: the Agent's own settings (PPO's are in ``config.json``)."""
    space = agent.action_space
    discrete = (
        {"n": int(space.n), "start": int(space.start)}
        if isinstance(space, spaces.Discrete)
        else None
    )
    fallback = agent.fallback_action
    if isinstance(fallback, np.integer | np.floating):
        fallback = fallback.item()
    return {
        "format": agent.FORMAT,
        "class": type(agent).__qualname__,
        "generate_config": {
            "max_new_tokens": agent.policy.max_new_tokens,
            "temperature": agent.policy.temperature,
            "do_sample": agent.do_sample,
        },
        "episodes_per_update": agent.episodes_per_update,
        "use_target_kl": agent.use_target_kl,
        "sft_replay": agent.sft_replay,
        "max_context_tokens": agent.max_context_tokens,
        "discrete_action_space": discrete,
        "action_names": list(agent.action_names) if agent.action_names else None,
        "on_invalid": agent.on_invalid,
        "fallback_action": fallback,
        "invalid_penalty": agent.invalid_penalty,
    }


def saved_arguments(directory: Path, expected_format: str) -> dict[str, Any]:
    """The constructor arguments that rebuild the Agent saved in ``directory``."""
    agent_file = directory / "agent.json"
    if not agent_file.is_file() or not (directory / "config.json").is_file():
        raise FileNotFoundError(
            f"{directory} is not a saved gym_llm Agent (needs agent.json and config.json); "
            "save one with agent.save(path)."
        )
    saved = json.loads(agent_file.read_text())
    if saved.get("format") != expected_format:
        raise ValueError(f"{agent_file} has format {saved.get('format')!r}, not {expected_format}.")
    ppo = SavedConfig.read(directory)
    hyper = ppo.constructor_kwargs()
    ppo_config = {
        "episodes_per_update": saved["episodes_per_update"],
        "mini_batch_size": hyper["batch_size"],
        **{k: hyper[k] for k in set(PPO_KEYS.values()) if k in hyper},
    }
    policy_kwargs = ppo.load_policy_kwargs()
    discrete = saved["discrete_action_space"]
    arguments: dict[str, Any] = {
        "model": policy_kwargs["model"],
        "generate_config": saved["generate_config"],
        "ppo_config": ppo_config,
        "use_target_kl": saved["use_target_kl"],
        "sft_replay": saved["sft_replay"],
        "max_context_tokens": saved["max_context_tokens"],
        "action_space": None
        if discrete is None
        else spaces.Discrete(discrete["n"], start=discrete["start"]),
        "action_names": saved["action_names"],
        "on_invalid": saved["on_invalid"],
        "fallback_action": saved["fallback_action"],
        "invalid_penalty": saved["invalid_penalty"],
        "lora": policy_kwargs["lora"],
        "trainable_layers": policy_kwargs["trainable_layers"],
    }
    return arguments


def check_arguments(
    on_invalid: str,
    max_context_tokens: int,
    sft_replay: float,
    sft_warm_start: bool,
    sft_demos: Any,
) -> None:
    """The Agent's own arguments, checked before anything is built."""
    if on_invalid not in ("fallback", "raise"):
        raise ValueError(f"on_invalid must be 'fallback' or 'raise', got {on_invalid!r}.")
    if max_context_tokens < 1:
        raise ValueError(f"max_context_tokens must be >= 1, got {max_context_tokens}.")
    if not 0.0 <= sft_replay <= 1.0:
        raise ValueError(f"sft_replay is a share of episodes in [0, 1], got {sft_replay}.")
    if sft_warm_start and sft_demos is None:
        raise ValueError(
            "sft_warm_start=True needs demonstrations: pass sft_demos=PATH (chat-messages "
            "JSONL, see gym_llm.rl.sft) or a list of {'messages': [...]} records."
        )


def agent_policy_kwargs(
    model: Any,
    tokenizer: Any,
    generate: Mapping[str, Any],
    system_prompt: str,
    lora: Any,
    trainable_layers: Any,
) -> dict[str, Any]:
    """``LLMPolicy`` arguments of an Agent: generate mode over whole conversations."""
    policy_kwargs: dict[str, Any] = {
        "model": model,
        "conversation": True,
        "action_mode": "generate",
        "system_prompt": system_prompt or None,
        "temperature": float(generate.get("temperature", 1.0)),
        "lora": {} if isinstance(lora, str) and lora == "default" else lora,
        "trainable_layers": trainable_layers,
    }
    if "max_new_tokens" in generate:
        policy_kwargs["max_new_tokens"] = int(generate["max_new_tokens"])
    if not isinstance(model, str):
        policy_kwargs["tokenizer"] = tokenizer
    return policy_kwargs
