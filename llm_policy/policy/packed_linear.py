"""Frozen linear weights pre-packed for oneDNN, so CPU rollouts stop re-packing them every call.

A PyTorch ``nn.Linear`` on the CPU calls MKL's sgemm, which re-packs the whole weight matrix into
its blocked layout on *every* call. During rollouts the batch is small (8 rows in a decode step,
a few hundred in a prompt pass), so that copy, not the arithmetic, is most of the time: on the
2-core CPU this was measured on, a ``[8, 576] x [576, 1536]`` product took 0.38-0.55 ms with
``F.linear`` and 0.20 ms with the weight packed once for oneDNN; SmolLM2's LM head (49152 x 576)
17 ms and 5 ms. With LoRA the base weights are frozen, so they are packed once and reused by
every rollout for the rest of training.

Only rollouts use them (no-gradient passes inside :meth:`PackedLinears.active`), and only for
inputs of at most :data:`PACKED_MAX_ROWS` rows (decode steps, the LM head on last tokens), where
packing pays and the input shapes are few (see there: oneDNN keeps a kernel per shape); the PPO
update keeps the ordinary modules, so training, gradients and saved weights are untouched. The packed
kernels add up the same products in another order, so rollout log-probs differ from the update's
recomputation by float32 rounding: within 1e-5 on the test models (tested); on SmolLM2-135M with
a random non-zero adapter the largest per-token gap over 749 sampled tokens was 3.5e-5 (mean
6.6e-6), against 2.7e-5 (mean 3.2e-6) without packing (``benchmarks/speed/logprob_gap.py``, with the
row limit; 4.5e-5 against 1.7e-5 when prompt passes were packed too). ``LLMPolicy(pack_frozen_weights=False)`` gives the tighter figure.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TypeGuard

import torch
from torch import nn

#: Batch size hint for packing (oneDNN picks its block layout from it; any batch size works).
_PACK_BATCH_HINT = 8
#: Inputs with more rows (tokens) than this take the ordinary path. Packing pays where the
#: re-packing copy dominates, i.e. few rows: decode steps and the LM head on last tokens (8 rows:
#: 1.2-1.5x faster on 576-wide SmolLM2 layers, 3x on its LM head); from 64 rows up the two paths
#: are within noise of each other. And oneDNN keeps a compiled kernel for every new input shape it
#: sees: prompt passes, whose width changes with every batch, grew native memory without end
#: (137 to 269 MB over 400 prompt passes of random widths, a tiny model; flat with this limit),
#: while the shapes of small inputs are few.
PACKED_MAX_ROWS = 32


def packing_available() -> bool:
    """Whether this torch build has the oneDNN linear ops (CPU builds with MKLDNN do)."""
    return bool(
        torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    )


def _bf16_packing() -> bool:
    """Whether oneDNN packs bf16 weights here: it needs AVX512 (BW/VL/DQ) or AVX-NE-CONVERT, and
    raises on other CPUs (seen on this project's 2-core AVX2 machine) instead of falling back."""
    check = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    return bool(check is not None and check())


def _packable(module: nn.Module) -> TypeGuard[nn.Linear]:
    # Exact type: subclasses (quantised linears, for instance) compute something else.
    weight = getattr(module, "weight", None)
    return (
        type(module) is nn.Linear
        and isinstance(weight, torch.Tensor)
        and not weight.requires_grad
        and weight.device.type == "cpu"
        and (weight.dtype == torch.float32 or (weight.dtype == torch.bfloat16 and _bf16_packing()))
    )


class _Packed:
    """One frozen linear's packed weight, repacked if the weight is modified in place."""

    def __init__(self, module: nn.Linear) -> None:
        self.module = module
        self.version = -1
        self.weight: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        module = self.module
        weight = module.weight
        if (
            torch.is_grad_enabled()
            or weight.requires_grad
            or weight.device.type != "cpu"
            or x.dtype != weight.dtype
            or x.numel() > PACKED_MAX_ROWS * x.shape[-1]
        ):
            return nn.Linear.forward(module, x)
        if self.weight is None or self.version != weight._version:
            with torch.inference_mode(False), torch.no_grad():
                self.weight = torch.ops.mkldnn._reorder_linear_weight(
                    weight.detach(), _PACK_BATCH_HINT
                )
            self.version = weight._version
        return torch.ops.mkldnn._linear_pointwise(x, self.weight, module.bias, "none", [], "")  # type: ignore[no-any-return]


class PackedLinears:
    """The frozen CPU ``nn.Linear`` modules of a model, with weights packed for oneDNN on first use.

    Weights are packed lazily (the first rollout pays ~1-2 s for a 135M model) and kept: the
    memory cost is one more copy of the frozen linear weights. A weight changed in place is
    repacked; one that became trainable falls back to the ordinary path.

    >>> layer = nn.Linear(4, 2).requires_grad_(False)
    >>> packed = PackedLinears(nn.Sequential(layer))
    >>> with torch.no_grad(), packed.active():
    ...     torch.allclose(layer(torch.ones(3, 4)), nn.Linear.forward(layer, torch.ones(3, 4)))
    True
    """

    def __init__(self, model: nn.Module) -> None:
        self._packed = (
            [_Packed(m) for m in model.modules() if _packable(m)] if packing_available() else []
        )

    def __len__(self) -> int:
        return len(self._packed)

    @property
    def packed_bytes(self) -> int:
        """Memory held by the packed copies so far."""
        return sum(
            p.module.weight.numel() * p.module.weight.element_size()
            for p in self._packed
            if p.weight is not None
        )

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Route no-gradient calls of the packed modules through oneDNN inside this block."""
        patched: list[nn.Module] = []
        try:
            for packed in self._packed:
                if "forward" not in vars(packed.module):  # not already routed (nested blocks)
                    packed.module.forward = packed.forward  # type: ignore[method-assign,assignment]
                    patched.append(packed.module)
            yield
        finally:
            for module in patched:
                del module.forward
