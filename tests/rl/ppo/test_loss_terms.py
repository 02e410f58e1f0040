"""The loss terms against hand-computed values (no model)."""

from __future__ import annotations

import math

import pytest
import torch

from gym_llm.rl.ppo.loss_terms import (
    clipped_surrogate,
    entropy_bonus,
    k3_kl,
    listed_kl,
    masked_mean,
    probability_floor,
    value_loss,
)


def test_masked_mean_ignores_padding_and_handles_empty() -> None:
    values = torch.tensor([[1.0, 2.0, 100.0], [3.0, 100.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert masked_mean(values, mask).item() == pytest.approx(2.0)
    assert masked_mean(values, torch.zeros_like(mask)).item() == 0.0


def test_clipped_surrogate_matches_the_formula_by_hand() -> None:
    old = torch.log(torch.tensor([[0.5, 0.5], [0.2, 0.2]]))
    new = torch.log(torch.tensor([[0.55, 0.5], [0.3, 0.2]]))  # ratios 1.1, 1.0 / 1.5, (pad)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    advantages = torch.tensor([1.0, -2.0])
    terms = clipped_surrogate(new, old, advantages, mask, clip_range=0.2)
    # turn 0: min(1.1 * 1, 1.1 * 1) = 1.1 ; min(1.0, 1.0) = 1.0
    # turn 1: A < 0, r = 1.5: min(1.5 * -2, 1.2 * -2) = -3.0
    expected = -(1.1 + 1.0 - 3.0) / 3
    assert terms.loss.item() == pytest.approx(expected, rel=1e-5)
    assert terms.clip_fraction == pytest.approx(1 / 3)  # only 1.5 left [0.8, 1.2]
    k3 = [(r - 1) - math.log(r) for r in (1.1, 1.0, 1.5)]
    assert terms.approx_kl == pytest.approx(sum(k3) / 3, rel=1e-5)
    assert terms.max_ratio_error == pytest.approx(0.5, rel=1e-5)


def test_clipped_surrogate_gradient_vanishes_when_clipped_in_the_advantage_direction() -> None:
    old = torch.zeros(1, 1)
    new = torch.tensor([[math.log(1.5)]], requires_grad=True)
    terms = clipped_surrogate(new, old, torch.tensor([1.0]), torch.ones(1, 1), 0.2)
    terms.loss.backward()
    assert new.grad is not None and new.grad.abs().item() == 0.0


def test_value_loss_plain_and_clipped() -> None:
    values = torch.tensor([1.0, 3.0])
    returns = torch.tensor([0.0, 0.0])
    assert value_loss(values, returns).item() == pytest.approx((1 + 9) / 2)
    old = torch.tensor([0.0, 2.5])
    # clipped: [0.2, 2.7] -> errors [0.04, 7.29]; max with [1, 9] -> [1, 9]
    assert value_loss(values, returns, old, 0.2).item() == pytest.approx(5.0)
    # a value moving toward the target further than the clip gets the clipped (larger) error
    assert value_loss(
        torch.tensor([0.0]), torch.tensor([0.0]), torch.tensor([2.0]), 0.5
    ).item() == (pytest.approx(1.5**2))
    with pytest.raises(ValueError, match="old_values"):
        value_loss(values, returns, None, 0.2)


def test_k3_kl_is_zero_at_the_reference_and_matches_the_formula() -> None:
    logp = torch.log(torch.tensor([[0.5, 0.25]]))
    mask = torch.ones(1, 2)
    assert k3_kl(logp, logp, mask).item() == pytest.approx(0.0)
    ref = torch.log(torch.tensor([[0.25, 0.25]]))
    d = math.log(0.25) - math.log(0.5)
    assert k3_kl(logp, ref, mask).item() == pytest.approx((math.exp(d) - d - 1) / 2, rel=1e-6)


def test_listed_kl_is_exact_and_what_k3_estimates_from_the_old_policys_draws() -> None:
    old = torch.tensor([[0.7, 0.2, 0.1, 0.0]])
    new = torch.tensor([[0.4, 0.3, 0.2, 0.1]])
    want = sum(p * math.log(p / q) for p, q in zip([0.7, 0.2, 0.1], [0.4, 0.3, 0.2], strict=True))
    assert listed_kl(old, torch.log(new)) == pytest.approx(want, rel=1e-5)
    assert listed_kl(old, torch.log(old.clamp(min=1e-30))) == pytest.approx(0.0, abs=1e-6)
    # k3 over actions drawn from the old policy estimates the same number ...
    old, new = torch.tensor([[0.85, 0.05, 0.05, 0.05]]), torch.tensor([[0.55, 0.15, 0.15, 0.15]])
    want = listed_kl(old, torch.log(new))
    torch.manual_seed(0)
    drawn = torch.multinomial(old[0], 200_000, replacement=True)
    log_ratio = torch.log(new[0, drawn]) - torch.log(old[0, drawn])
    assert ((log_ratio.exp() - 1) - log_ratio).mean().item() == pytest.approx(want, rel=0.05)
    # ... and misreads it from uniform draws, which the exact reading does not need.
    drawn = torch.randint(4, (200_000,))
    log_ratio = torch.log(new[0, drawn]) - torch.log(old[0, drawn])
    assert ((log_ratio.exp() - 1) - log_ratio).mean().item() > 3 * want


def test_entropy_bonus_is_the_negative_mean() -> None:
    assert entropy_bonus(torch.tensor([1.0, 3.0])).item() == pytest.approx(-2.0)
    assert entropy_bonus(torch.zeros(0)).item() == 0.0  # no rows: nothing to raise


def test_the_floor_pulls_a_cornered_action_out_where_the_entropy_barely_does() -> None:
    for rare in (1e-2, 1e-4, 1e-6):
        logits = torch.log(torch.tensor([[1 - rare, rare]])).requires_grad_()
        probability_floor(torch.log_softmax(logits, -1), 0.05).backward()
        assert logits.grad is not None
        assert logits.grad[0, 1].item() == pytest.approx(-(1 - rare), rel=1e-4)  # undamped
        again = logits.detach().requires_grad_()
        p = torch.softmax(again, -1)
        entropy_bonus(-(p * p.log()).sum(-1)).backward()
        assert again.grad is not None
        assert abs(again.grad[0, 1].item()) < 0.05  # the entropy's pull vanishes with p
    above = torch.log(torch.tensor([[0.9, 0.1], [0.5, 0.5]]))
    assert probability_floor(above, 0.05).item() == 0.0  # every action over the floor: no term
    both = torch.log(torch.tensor([[0.98, 0.02], [0.5, 0.5]]))
    assert probability_floor(both, 0.05).item() == pytest.approx(math.log(0.05 / 0.02) / 2)
    assert probability_floor(torch.zeros((0, 2)), 0.05).item() == 0.0
