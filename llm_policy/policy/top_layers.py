"""Train only the top layers, and start the update where the frozen layers end.

PPO's update is a forward and a backward pass through the model for every turn. When only the
top ``k`` decoder layers train (LoRA on those layers, or their own weights without LoRA), the
layers below them compute exactly what they computed during the rollout: same frozen weights,
same inputs. So the rollout keeps, for every position the update needs, the hidden state that
enters the first trainable layer (:class:`TurnStates`), and the update runs only layers
``start .. L-1`` on it (:class:`TopLayers`) instead of all ``L`` layers on the token ids. On
SmolLM2-135M (30 layers) with ``k = 4`` that is ~7x less work per update, forward and backward.

The hidden states cost memory: ``positions x hidden_size x 4`` bytes per turn (Blackjack on
SmolLM2-135M: 46 new prompt positions x 576 -> 106 KB per turn, 27 MB for a 256-turn rollout).

:class:`TopLayers` mirrors the decoder loop of Hugging Face's Llama-family models (``LlamaModel``,
``Qwen2Model``, ``MistralModel``, ``Phi3Model``, ``GemmaModel``: mask, rotary embeddings,
layers, final norm). :func:`top_layers_supported` says whether a model has that structure with
full attention in every layer; where it does not, the policy recomputes the whole model instead
(same results, no speed-up).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


@dataclass
class TurnStates:
    """The first trainable layer's input at the positions one turn's update computes.

    ``prompt`` holds the prompt's positions from ``offset`` on (``offset`` = the shared prefix's
    length when the rollout batch encoded that prefix once, else 0). ``action`` holds the positions
    fed back after the prompt: in generate mode the sampled tokens but the last (``(T-1, d)``), in
    choice mode with multi-token actions every candidate's tokens but its last (``(K, W-1, d)``);
    ``None`` where there are none (one-token replies or actions).
    """

    prompt: torch.Tensor
    offset: int
    action: torch.Tensor | None = None

    @property
    def nbytes(self) -> int:
        size = self.prompt.numel() * self.prompt.element_size()
        if self.action is not None:
            size += self.action.numel() * self.action.element_size()
        return int(size)


#: Share of a model's layers that train by default with LoRA (``trainable_layers="auto"``): 8
#: of SmolLM2-135M's 30. A quarter learned KeywordBandit as fast per env step as all layers;
#: the top 4 (13%) did not learn it at all (benchmarks/RESULTS.md).
AUTO_TRAINABLE_SHARE = 0.25

TrainableLayers = int | float | str | None


def resolve_trainable_layers(value: TrainableLayers, total: int, uses_lora: bool) -> int | None:
    """How many top layers train (``None``: all of them), from ``LLMPolicy(trainable_layers=)``.

    ``"auto"``: :data:`AUTO_TRAINABLE_SHARE` of the layers (rounded up) with LoRA, all of them
    without (``lora=None`` means full fine-tuning); an ``int`` counts layers; a ``float`` in
    ``(0, 1)`` is a share of them (rounded up); ``None`` or ``"all"``: every layer.

    >>> resolve_trainable_layers("auto", 30, uses_lora=True), resolve_trainable_layers(0.5, 3, True)
    (8, 2)
    >>> resolve_trainable_layers("auto", 30, uses_lora=False) is None
    True
    """
    if value == "auto":
        value = AUTO_TRAINABLE_SHARE if uses_lora else None
    if value is None or value == "all":
        return None
    if isinstance(value, float) and not isinstance(value, bool) and 0 < value < 1:
        return max(1, math.ceil(value * total))
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= total:
        return None if value == total else value
    raise ValueError(
        f"trainable_layers must be 'auto', None or 'all', a number of layers between 1 and the "
        f"model's {total}, or a share of them in (0, 1); got {value!r}."
    )


def parse_trainable_layers(text: TrainableLayers) -> TrainableLayers:
    """``"auto"``, ``"all"``/``"none"``, ``"8"`` or ``"0.25"`` (a flag or config value) as
    :func:`resolve_trainable_layers` takes it; anything else is a ``ValueError``.

    >>> [parse_trainable_layers(t) for t in ("auto", "none", "8", "0.25")]
    ['auto', None, 8, 0.25]
    """
    if not isinstance(text, str):
        return text
    value = text.strip().lower()
    if value in ("auto", "all"):
        return value
    if value == "none":
        return None
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    raise ValueError(
        f"trainable_layers must be 'auto', 'all', a number of layers (8) or a share of them "
        f"(0.25); got {text!r}."
    )


def decoder_of(lm: Any) -> Any:
    """The decoder stack (``LlamaModel`` & co.) of a causal LM, PEFT-wrapped or not."""
    base = lm.get_base_model() if hasattr(lm, "get_base_model") else lm
    return base.get_decoder()


def num_layers(lm: Any) -> int:
    return int(lm.config.get_text_config().num_hidden_layers)


def top_layers_supported(lm: Any) -> bool:
    """Whether :class:`TopLayers` can run this model's top layers on stored hidden states: a
    decoder with ``layers``, ``norm`` and ``rotary_emb``, and full attention in every layer."""
    try:
        decoder = decoder_of(lm)
    except (AttributeError, NotImplementedError):
        return False
    if not all(hasattr(decoder, name) for name in ("layers", "norm", "rotary_emb")):
        return False
    config = lm.config.get_text_config()
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None and any(t != "full_attention" for t in layer_types):
        return False
    return getattr(config, "sliding_window", None) is None or not getattr(
        config, "use_sliding_window", True
    )


class TopLayers:
    """Layers ``start .. L-1`` and the final norm of a causal LM, run on given hidden states.

    Args:
        lm: the (PEFT-wrapped) causal LM; its modules are used, not copied, so LoRA adapters,
            ``disable_adapter()`` and gradients work as in a whole-model pass.
        start: index of the first layer to run (the first trainable one).
    """

    def __init__(self, lm: Any, start: int) -> None:
        total = num_layers(lm)
        if not 0 <= start < total:
            raise ValueError(f"start must be in [0, {total}), got {start}.")
        self.lm, self.start = lm, start
        self.decoder = decoder_of(lm)
        self.config = lm.config

    @property
    def first_layer(self) -> nn.Module:
        return self.decoder.layers[self.start]  # type: ignore[no-any-return]

    @contextlib.contextmanager
    def capture(self) -> Iterator[list[torch.Tensor]]:
        """Collect the hidden states entering layer ``start`` in every model call inside the
        block, in call order (detached: they are inputs to the update, not part of a graph)."""
        captured: list[torch.Tensor] = []

        def hook(_module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            hidden = args[0] if args else kwargs["hidden_states"]
            captured.append(hidden.detach())

        handle = self.first_layer.register_forward_pre_hook(hook, with_kwargs=True)
        try:
            yield captured
        finally:
            handle.remove()

    def new_cache(self) -> Any:
        from transformers import DynamicCache

        return DynamicCache(config=self.config)

    def encode_prefix(self, states: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Keys and values of a ``(P, d)`` prefix in layers ``start..``, one row (gradients flow
        if enabled)."""
        cache = self.new_cache()
        positions = torch.arange(states.shape[0], device=states.device).unsqueeze(0)
        mask = torch.ones((1, states.shape[0]), dtype=torch.long, device=states.device)
        self(states.unsqueeze(0), mask, positions, cache)
        return [(cache.layers[i].keys, cache.layers[i].values) for i in self.layer_indices]

    def prefix_cache(self, prefix: list[tuple[torch.Tensor, torch.Tensor]], rows: int) -> Any:
        """A cache holding ``prefix`` (from :meth:`encode_prefix`) for ``rows`` rows."""
        cache = self.new_cache()
        for index, (keys, values) in zip(self.layer_indices, prefix, strict=True):
            cache.update(keys.expand(rows, -1, -1, -1), values.expand(rows, -1, -1, -1), index)
        return cache

    @property
    def layer_indices(self) -> range:
        return range(self.start, num_layers(self.lm))

    def __call__(
        self,
        hidden: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        cache: Any = None,
    ) -> torch.Tensor:
        """Final hidden states (after the norm) for ``hidden`` ``(n, q, d)``.

        ``attention_mask`` is the 2D mask over cached and new positions, as for the whole model;
        ``cache`` (from :meth:`prefix_cache` or :meth:`new_cache`) gets the new keys and values.
        """
        from transformers.masking_utils import create_causal_mask

        mask = create_causal_mask(
            config=self.config,
            inputs_embeds=hidden,
            attention_mask=attention_mask,
            past_key_values=cache,
            position_ids=position_ids,
            layer_idx=self.start if cache is not None else None,
        )
        position_embeddings = self.decoder.rotary_emb(hidden, position_ids=position_ids)
        for layer in self.decoder.layers[self.start : num_layers(self.lm)]:
            hidden = layer(
                hidden,
                attention_mask=mask,
                position_embeddings=position_embeddings,
                position_ids=position_ids,
                past_key_values=cache,
                use_cache=cache is not None,
            )
        return self.decoder.norm(hidden)  # type: ignore[no-any-return]

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The LM head on final hidden states."""
        return self.lm.get_output_embeddings()(hidden)  # type: ignore[no-any-return]


def pad_states(
    prompts: list[torch.Tensor], extras: list[torch.Tensor] | None = None
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Rows of hidden states as one batch: ``(hidden, mask, width)``.

    Each row is ``prompts[i]`` (``(P_i, d)``) left-padded to ``width = max P_i``, followed by
    ``extras[i]`` (``(E_i, d)``, e.g. a reply's fed-back tokens) right-padded, as token ids are for
    a whole-model pass; so the last prompt position of every row is column ``width - 1``.
    ``mask`` is 1 on real positions. The result is a new tensor: stored states (inference tensors
    from a rollout) are copied, never modified.
    """
    first = prompts[0]
    d = first.shape[-1]
    width = max(p.shape[0] for p in prompts)
    extra_width = max((e.shape[0] for e in extras), default=0) if extras is not None else 0
    n = len(prompts)
    hidden = torch.zeros((n, width + extra_width, d), dtype=first.dtype, device=first.device)
    mask = torch.zeros((n, width + extra_width), dtype=torch.long, device=first.device)
    for i, prompt in enumerate(prompts):
        hidden[i, width - prompt.shape[0] : width] = prompt
        mask[i, width - prompt.shape[0] : width] = 1
        if extras is not None and extras[i].shape[0]:
            hidden[i, width : width + extras[i].shape[0]] = extras[i]
            mask[i, width : width + extras[i].shape[0]] = 1
    return hidden, mask, width
