"""The critic's head: its running return statistics and what they do to its values (no model
needed)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gym_llm.policy.value_head import ValueHead


def test_pooled_moments_equal_the_moments_of_the_pooled_sample() -> None:
    rng = np.random.default_rng(1)
    first, second = rng.normal(3, 2, size=17), rng.normal(-40, 9, size=64)
    head = ValueHead(2, torch.device("cpu"), normalize=True)
    head.update_statistics((float(first.mean()), float(first.var()), float(first.size)))
    assert (float(head.mean), float(head.var)) == pytest.approx((first.mean(), first.var()))
    head.update_statistics((float(second.mean()), float(second.var()), float(second.size)))
    pooled = np.concatenate([first, second])
    moments = float(head.mean), float(head.var), float(head.count)
    assert moments == pytest.approx((pooled.mean(), pooled.var(), pooled.size))


def test_without_normalisation_it_is_a_zero_linear_layer() -> None:
    head = ValueHead(4, torch.device("cpu"))
    assert set(head.state_dict()) == {"weight", "bias"}  # checkpoints as before
    assert head.std == 1.0
    assert torch.equal(head(torch.ones(3, 4)), torch.zeros(3, 1))
    head.update_statistics((-30.0, 100.0, 64.0))  # a no-op
    assert torch.equal(head.weight, torch.zeros(1, 4))


def test_the_zero_start_means_the_mean_return_once_statistics_are_in() -> None:
    head = ValueHead(4, torch.device("cpu"), normalize=True)
    features = torch.randn(8, 4)
    assert torch.equal(head(features), torch.zeros(8, 1))  # nothing seen: as the plain head
    head.update_statistics((-30.0, 100.0, 64.0))
    assert float(head.mean) == -30.0 and head.std == pytest.approx(10.0)
    torch.testing.assert_close(head(features), torch.full((8, 1), -30.0))
    with torch.no_grad():  # one unit of output is one std of the returns
        head.bias.fill_(1.0)
    torch.testing.assert_close(head(features), torch.full((8, 1), -20.0))
    head.update_statistics((-10.0, 4.0, 64.0))
    assert float(head.count) == 128 and float(head.mean) == pytest.approx(-20.0)
    assert set(head.state_dict()) == {"weight", "bias", "mean", "var", "count"}


def test_constant_returns_do_not_divide_by_zero() -> None:
    head = ValueHead(2, torch.device("cpu"), normalize=True)
    head.update_statistics((1.0, 0.0, 16.0))
    assert head.std == ValueHead.MIN_STD
    assert torch.isfinite(head(torch.ones(1, 2))).all()
