"""The optimizer's parameter groups: the LM's trainable weights, the action head and the value head.

Each group carries ``lr_scale``, its learning rate as a multiple of the policy's, so that PPO's
learning-rate schedule (``lr = schedule(progress) * lr_scale``) keeps the ratios. Separate rates
matter because Adam moves every weight by about the learning rate per step whatever its
gradient's size: how many steps a zero-initialised head needs to separate the states is set by
its distance over its rate (``benchmarks/RESULTS.md``, "Out of the softmax corner"), and the
critic is commonly trained 10-30x faster than the policy (TWOSOME, RAGEN).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from torch import nn


def check_lr_scale(name: str, value: float) -> float:
    """``value`` as a float, or a ``ValueError`` naming the argument when it is not > 0.

    >>> check_lr_scale("value_lr_scale", 10)
    10.0
    """
    if not value > 0:  # also refuses NaN
        raise ValueError(f"{name} must be > 0, got {value}.")
    return float(value)


def param_groups(
    trainable: Iterable[nn.Parameter],
    value_head: nn.Module,
    action_head: nn.Module | None,
    lr: float,
    value_lr_scale: float = 1.0,
    action_head_lr_scale: float = 1.0,
) -> list[dict[str, Any]]:
    """The LM's weights at ``lr``, then the action head's and the value head's at their scales.

    ``trainable`` is every trainable parameter of the policy; the heads' are taken out of it, so
    each parameter lands in exactly one group. Empty groups are left out.
    """
    value = [p for p in value_head.parameters() if p.requires_grad]
    head = [p for p in action_head.parameters() if p.requires_grad] if action_head else []
    taken = {id(p) for p in (*value, *head)}
    rest = [p for p in trainable if p.requires_grad and id(p) not in taken]
    groups: list[dict[str, Any]] = [
        {"params": rest, "lr": lr, "lr_scale": 1.0},
        {"params": head, "lr": lr * action_head_lr_scale, "lr_scale": action_head_lr_scale},
        {"params": value, "lr": lr * value_lr_scale, "lr_scale": value_lr_scale},
    ]
    return [g for g in groups if g["params"]]
