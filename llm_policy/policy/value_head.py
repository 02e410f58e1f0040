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

import numpy as np
import torch
from stable_baselines3.common.running_mean_std import RunningMeanStd
from torch import nn


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
            f64 = torch.float64
            self.register_buffer("mean", torch.tensor(0.0, dtype=f64, device=device))
            self.register_buffer("var", torch.tensor(1.0, dtype=f64, device=device))
            self.register_buffer("count", torch.tensor(0.0, dtype=f64, device=device))

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
        running = RunningMeanStd(shape=())  # SB3's pooling (Chan et al.), on the saved moments
        running.mean, running.var = self.mean.cpu().numpy(), self.var.cpu().numpy()
        running.count = float(self.count)
        running.update_from_moments(np.asarray(moments[0]), np.asarray(moments[1]), moments[2])
        self.mean.fill_(float(running.mean))
        self.var.fill_(float(running.var))
        self.count.fill_(running.count)
