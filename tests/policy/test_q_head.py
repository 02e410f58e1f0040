"""The Q head: standardised input, calibrated once, values for every listed action."""

from __future__ import annotations

import pytest
import torch

from gym_llm.policy.q_head import QHead


def test_q_head_reads_features_standardised_once_and_fits_values() -> None:
    torch.manual_seed(0)
    # features as an LM gives them: one large shared vector plus a small state-dependent part
    shared = torch.full((8,), 50.0)
    states = torch.randn(6, 8) * 0.1
    features = shared + states
    q_star = torch.randn(6, 3)
    head = QHead(8, 3, width=32)
    assert not head.is_calibrated
    head.calibrate(features)
    assert head.is_calibrated
    with pytest.raises(RuntimeError, match="calibrated already"):
        head.calibrate(features)
    optimizer = torch.optim.Adam(head.parameters(), lr=1e-2)
    for _ in range(300):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(head(features), q_star).backward()
        optimizer.step()
    assert head(features).shape == (6, 3)
    assert torch.nn.functional.mse_loss(head(features), q_star).item() < 1e-3
    # the input scale is state, saved with the weights
    assert {"centre", "scale", "calibrated"} <= set(head.state_dict())


def test_q_head_rejects_empty_sizes() -> None:
    with pytest.raises(ValueError, match="width"):
        QHead(8, 0)


def test_a_zero_start_head_starts_at_zero_and_learns_as_the_mlp_does() -> None:
    torch.manual_seed(0)
    head = QHead(8, 3, width=16, zero_start=True)
    x = torch.randn(5, 8)
    assert torch.equal(head(x), torch.zeros(5, 3))
    assert not any(p.requires_grad for p in head.start.parameters())
    optimizer = torch.optim.Adam([p for p in head.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(100):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(head(x)[:, 0], torch.ones(5)).backward()
        optimizer.step()
    assert torch.allclose(head(x)[:, 0], torch.ones(5), atol=0.05)
    # saved without the zero start (as before it existed): loads as the MLP's own output
    plain = QHead(8, 3, width=16)
    loaded = QHead(8, 3, width=16, zero_start=True)
    loaded.load_state_dict(plain.state_dict())
    assert torch.equal(loaded(x), plain(x))
    copied = QHead(8, 3, width=16, zero_start=True)
    copied.load_state_dict(head.state_dict())  # with its start: the same values
    assert torch.equal(copied(x), head(x))
