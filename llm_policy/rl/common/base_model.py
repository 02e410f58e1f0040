"""The base weights a saved agent carries when nothing else could rebuild them.

An agent is saved without its base model: ``config.json`` names the model (a registry name, a hub
id or a directory) and loading builds it again. A policy built from a model object with no name
or path (``LLMPolicy(model=my_model, tokenizer=tok)``, LlamaGym's ``Agent(model, tokenizer)``)
names nothing, so its base weights and tokenizer are written into the checkpoint as
``base_model/`` and ``config.json`` records ``./base_model``, which loading resolves against the
checkpoint directory. A policy loaded from such a checkpoint carries them on to its own saves
(its model path points into the old checkpoint, which checkpoint pruning may remove).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

logger = logging.getLogger(__name__)

#: The directory inside a saved agent, and what ``config.json`` records for it.
BASE_MODEL_DIR = "base_model"
BASE_MODEL_MARKER = f"./{BASE_MODEL_DIR}"


def needs_base_model(model_name: str | None) -> bool:
    """Whether a policy's model must travel with its checkpoint (no name or path of its own, or
    the ``base_model/`` of another checkpoint)."""
    if not model_name:
        return True
    path = Path(model_name)
    return path.name == BASE_MODEL_DIR and (path.parent / "config.json").is_file()


def resolve_model(model: Any, directory: Path) -> Any:
    """``config.json``'s model, with :data:`BASE_MODEL_MARKER` made a path in ``directory``."""
    return str(directory / BASE_MODEL_DIR) if model == BASE_MODEL_MARKER else model


def _base(lm: Any) -> Any:
    """The model under peft's wrapper (the model itself when it has none)."""
    return lm.get_base_model() if hasattr(lm, "get_base_model") else lm


def base_state_dict(lm: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The base model's own weights under its own names: LoRA's matrices left out and peft's
    ``base_layer`` wrappers unwrapped."""
    base = _base(lm)
    return {
        key.replace(".base_layer.", "."): value
        for key, value in base.state_dict().items()
        if "lora_" not in key
    }


def save_base_model(
    lm: torch.nn.Module, tokenizer: Any, directory: Path, announce: bool = True
) -> None:
    """Write the base weights and tokenizer as a model directory ``load_model`` reads (and say
    so in a log line, unless ``announce`` is off)."""
    from transformers import AutoModelForCausalLM

    base = _base(lm)
    dtype = next(base.parameters()).dtype
    fresh = AutoModelForCausalLM.from_config(base.config, dtype=dtype)
    fresh.load_state_dict(base_state_dict(lm), strict=True)  # every weight accounted for
    fresh.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    if not announce:
        return
    megabytes = sum(p.numel() * p.element_size() for p in fresh.parameters()) / 2**20
    logger.warning(
        "The policy's model has no name or path, so its base weights (%.1f MB) and tokenizer "
        "are saved with the agent, in its %s/ directory.",
        megabytes,
        BASE_MODEL_DIR,
    )


def base_model_writer(policy: Any) -> dict[str, Any]:
    """``write_agent_directory``'s ``directories`` for a policy: ``{"base_model": writer}`` when
    its base model must travel with the checkpoint, else nothing."""
    if not needs_base_model(policy.model_name):
        return {}

    def write(directory: Path) -> None:
        announce = not getattr(policy, "_base_model_announced", False)
        save_base_model(policy.lm, policy.tokenizer, directory, announce)
        policy._base_model_announced = True  # once per policy, not at every checkpoint

    return {BASE_MODEL_DIR: write}
