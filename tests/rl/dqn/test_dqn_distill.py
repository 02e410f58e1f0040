"""The distillation loss against hand-computed values (no model)."""

from __future__ import annotations

import math

import pytest
import torch

from gym_llm.rl.dqn.distill import posterior_cross_entropy


def test_cross_entropy_to_the_posterior() -> None:
    log_pi = torch.log(torch.tensor([[0.25, 0.75], [0.5, 0.5]]))
    target = torch.tensor([[1.0, 0.0], [0.2, 0.8]])
    expected = (-math.log(0.25) - math.log(0.5)) / 2
    assert posterior_cross_entropy(log_pi, target).item() == pytest.approx(expected)
    # an action the target rules out costs nothing, even at log pi = -inf
    ruled_out = torch.tensor([[0.0, float("-inf")]])
    assert posterior_cross_entropy(ruled_out, torch.tensor([[1.0, 0.0]])).item() == 0.0
