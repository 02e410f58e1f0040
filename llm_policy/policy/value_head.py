"""The critic's linear head, optionally on normalised returns (value normalisation as in MAPPO,
Yu et al. 2022).

A zero-initialised linear head trained with Adam moves by about its learning rate per step
whatever the size of its error, so a critic whose returns sit at -30 needs thousands of steps
to reach them, and PPO gives it a few dozen per rollout: the values stay near 0, explained
variance cannot show the offset, and a truncated episode bootstraps from a value near 0, as if
timing out were as good as finishing (measured on TextMaze: benchmarks/RESULTS.md). With
``normalize=True`` the head's output is in units of the returns' running mean and std, so its
zero start means "the mean return" from the first update on, and a unit of its output is one
std of the returns. The values it gives are always in return units.

PopArt (van Hasselt et al. 2016) also rescales the weights whenever the statistics move so that
no value changes; that would keep the zero start's values at 0 too, which is the fault this
fixes, so the statistics here move the values with them.
"""

from __future__ import annotations

import torch
from torch import nn


def merge_moments(
    moments: tuple[float, float, float], batch: tuple[float, float, float]
) -> tuple[float, float, float]:
    """``(mean, variance, count)`` of two samples pooled, from each one's moments (Chan et al.)."""
    mean, var, count = moments
    batch_mean, batch_var, batch_count = batch
    total = count + batch_count
    if total == 0:
        return mean, var, count
    delta = batch_mean - mean
    new_mean = mean + delta * batch_count / total
    m2 = var * count + batch_var * batch_count + delta**2 * count * batch_count / total
    return new_mean, m2 / total, total


class ValueHead(nn.Linear):
    """``hidden -> 1``, zero-initialised; with ``normalize`` it holds the returns' running
    ``mean``, ``var`` and ``count`` (buffers, saved with the policy) and outputs
    ``std * (wx + b) + mean``."""

    #: The std below which returns count as constant (no division by ~0).
    MIN_STD = 1e-4
    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, hidden: int, device: torch.device, normalize: bool = False) -> None:
        super().__init__(hidden, 1, device=device, dtype=torch.float32)
        nn.init.zeros_(self.weight)
        nn.init.zeros_(self.bias)
        self.normalize = normalize
        if normalize:
            for name, start in (("mean", 0.0), ("var", 1.0), ("count", 0.0)):
                self.register_buffer(name, torch.tensor(start, dtype=torch.float64, device=device))

    @property
    def std(self) -> float:
        """The scale of the head's output in return units (1 without normalisation)."""
        if not self.normalize:
            return 1.0
        return max(float(self.var.sqrt()), self.MIN_STD)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        out = super().forward(features)
        if not self.normalize:
            return out
        std = self.var.sqrt().clamp(min=self.MIN_STD)  # tensors: no device sync per call
        return out * std.to(out.dtype) + self.mean.to(out.dtype)

    def update_statistics(self, moments: tuple[float, float, float]) -> None:
        """Pool a rollout's returns' ``(mean, variance, count)`` into the running statistics
        (before the update that fits them)."""
        if not self.normalize or moments[2] == 0:
            return
        running = float(self.mean), float(self.var), float(self.count)
        for buffer, value in zip(
            (self.mean, self.var, self.count), merge_moments(running, moments), strict=True
        ):
            buffer.fill_(value)
