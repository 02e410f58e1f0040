"""What trains in a policy: LoRA settings (defaults, the JSON a saved agent records), which top
layers train, and freezing the rest; applied once, when the policy is built."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from gym_llm.policy.models import ModelSpec
from gym_llm.policy.top_layers import (
    TrainableLayers,
    decoder_of,
    num_layers,
    resolve_trainable_layers,
)

#: LoraConfig fields a saved agent records when they differ from peft's defaults.
_LORA_FIELDS = (
    "layers_to_transform",
    "layers_pattern",
    "rank_pattern",
    "alpha_pattern",
    "modules_to_save",
    "use_rslora",
    "use_dora",
    "init_lora_weights",
    "fan_in_fan_out",
)


@dataclass
class Trainable:
    """A model made trainable as asked, and what a policy records about it."""

    #: The model (a peft model with LoRA).
    lm: Any
    #: The LoRA settings in effect, as a JSON-able dict (``None``: full fine-tuning), before
    #: ``trainable_layers`` restricts them to some layers; what ``PPO.save`` records.
    lora_settings: dict[str, Any] | None
    #: How many top layers train (``None``: all).
    trainable_layers: int | None
    #: Index of the first decoder layer that trains (0: all of them).
    first_trainable_layer: int


def make_trainable(
    lm: nn.Module,
    lora: dict[str, Any] | Any | None,
    trainable_layers: TrainableLayers,
    spec: ModelSpec | None,
) -> Trainable:
    """Wrap ``lm`` with LoRA (``"default"``, a dict of ``LoraConfig`` fields or a ``LoraConfig``)
    on its top ``trainable_layers``, or, with ``lora=None``, freeze all but those layers."""
    total_layers = num_layers(lm)
    if isinstance(lora, str):
        if lora != "default":
            raise ValueError(
                f"lora must be 'default', a dict of LoraConfig fields, a LoraConfig or None "
                f"(full fine-tuning); got {lora!r}."
            )
        lora = {}
    if isinstance(lora, dict):
        from peft import LoraConfig

        targets = spec.lora_target_modules if spec else linear_names(lm)
        lora = LoraConfig(**{**default_lora(targets), **lora})
    settings = lora_dict(lora) if lora is not None else None
    own_layers = lora is not None and lora.layers_to_transform is not None
    if own_layers and trainable_layers == "auto":
        trainable_layers = None  # the caller chose LoRA's layers; nothing to resolve
    resolved = resolve_trainable_layers(trainable_layers, total_layers, uses_lora=lora is not None)
    first = total_layers - (resolved or total_layers)
    if lora is not None:
        from peft import get_peft_model

        if first:
            if own_layers:
                raise ValueError(
                    "Give either trainable_layers or LoRA's layers_to_transform, not both: "
                    f"got trainable_layers={trainable_layers!r} and layers_to_transform="
                    f"{lora.layers_to_transform} (pass trainable_layers=None to keep yours)."
                )
            lora = copy.copy(lora)  # the caller's config object stays as it was
            lora.layers_to_transform = list(range(first, total_layers))
        lm = get_peft_model(lm, lora)
    elif first:
        _freeze_below(lm, first)
    return Trainable(lm, settings, resolved, first)


def enable_gradient_checkpointing(lm: Any, uses_lora: bool) -> None:
    """Recompute activations in the backward pass instead of keeping them."""
    # transformers 5 renamed it; the old name still works but warns.
    if hasattr(lm, "activation_checkpointing_enable"):
        lm.activation_checkpointing_enable({"use_reentrant": False})
    else:
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if uses_lora:
        lm.enable_input_require_grads()


def default_lora(target_modules: Sequence[str] | str) -> dict[str, Any]:
    # lora_dropout=0: dropout would make training-time log-probs differ from rollout log-probs.
    return {
        "r": 16,
        "lora_alpha": 32,
        "lora_dropout": 0.0,
        "target_modules": list(target_modules)
        if not isinstance(target_modules, str)
        else target_modules,
        "bias": "none",
        "task_type": "CAUSAL_LM",
    }


def lora_dict(config: Any) -> dict[str, Any]:
    """A ``peft.LoraConfig`` as the dict that rebuilds it (sets as sorted lists), JSON-able."""
    from peft import LoraConfig

    defaults = LoraConfig().to_dict()
    out: dict[str, Any] = {}
    for key, value in config.to_dict().items():
        if isinstance(value, set):
            value = sorted(value)
        if key in ("r", "lora_alpha", "lora_dropout", "target_modules", "bias", "task_type") or (
            value != defaults.get(key) and key in _LORA_FIELDS
        ):
            out[key] = value
    return out


def linear_names(lm: nn.Module) -> list[str]:
    """The linear layers of a decoder block, by name (what peft's "all-linear" picks there; a
    list, because peft cannot restrict "all-linear" to some layers)."""
    block = decoder_of(lm).layers[0]
    return sorted(
        {name.split(".")[-1] for name, m in block.named_modules() if type(m) is nn.Linear}
    )


def _freeze_below(lm: nn.Module, start: int) -> None:
    """Full fine-tuning of the top layers only: everything but layers ``start..`` and the final
    norm is frozen (the embeddings too, which a tied LM head shares)."""
    decoder = decoder_of(lm)
    for param in lm.parameters():
        param.requires_grad_(False)
    for module in [*decoder.layers[start:], decoder.norm]:
        for param in module.parameters():
            param.requires_grad_(True)


def name_or_path(model: Any) -> str:
    """The hub id or path a model object was loaded from ("" for one built in memory)."""
    name = getattr(model, "name_or_path", None) or getattr(
        getattr(model, "config", None), "_name_or_path", None
    )
    return str(name or "")
