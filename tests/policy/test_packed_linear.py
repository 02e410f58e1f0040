"""Packed frozen linears: same numbers as ``nn.Linear`` (to float32 rounding), only where safe."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gym_llm.policy.packed_linear import PACKED_MAX_ROWS, PackedLinears, packing_available

pytestmark = pytest.mark.skipif(not packing_available(), reason="this torch has no oneDNN")


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    frozen = nn.Linear(16, 32).requires_grad_(False)
    no_bias = nn.Linear(32, 8, bias=False).requires_grad_(False)
    trainable = nn.Linear(8, 4)
    return nn.Sequential(frozen, nn.ReLU(), no_bias, trainable)


def test_packed_forward_matches_linear_and_is_used() -> None:
    model = _model()
    packed = PackedLinears(model)
    assert len(packed) == 2  # the trainable layer is left alone
    x = torch.randn(3, 5, 16)
    with torch.no_grad():
        expected = model(x)
        with packed.active():
            assert "forward" in vars(model[0]) and "forward" in vars(model[2])
            assert "forward" not in vars(model[3])
            got = model(x)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    assert packed.packed_bytes == (16 * 32 + 32 * 8) * 4
    assert all("forward" not in vars(m) for m in model)  # restored


def test_gradient_passes_use_the_ordinary_module() -> None:
    """The update needs autograd through frozen layers: inside the block it still gets it."""
    model = _model()
    packed = PackedLinears(model)
    x = torch.randn(4, 16, requires_grad=True)
    with packed.active():
        model(x).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    assert packed.packed_bytes == 0  # nothing was packed: every call needed gradients


def test_weight_changed_in_place_is_repacked() -> None:
    layer = nn.Linear(8, 8).requires_grad_(False)
    packed = PackedLinears(layer)
    x = torch.randn(2, 8)
    with torch.no_grad(), packed.active():
        layer(x)
        layer.weight.mul_(2.0)
        torch.testing.assert_close(layer(x), nn.Linear.forward(layer, x), rtol=0, atol=1e-5)


def test_layer_made_trainable_falls_back() -> None:
    layer = nn.Linear(8, 8).requires_grad_(False)
    packed = PackedLinears(layer)
    layer.requires_grad_(True)
    with torch.no_grad(), packed.active():
        layer(torch.randn(2, 8))
    assert packed.packed_bytes == 0


def test_nested_blocks_and_errors_restore_the_modules() -> None:
    model = _model()
    packed = PackedLinears(model)
    with pytest.raises(RuntimeError, match="boom"), packed.active():
        with packed.active():
            pass
        assert "forward" in vars(model[0])  # the inner block left the outer one's patch
        raise RuntimeError("boom")
    assert all("forward" not in vars(m) for m in model)


def test_subclasses_and_non_float_weights_are_not_packed() -> None:
    class Custom(nn.Linear):
        pass

    custom = Custom(4, 4).requires_grad_(False)
    half = nn.Linear(4, 4).half().requires_grad_(False)
    assert len(PackedLinears(nn.Sequential(custom, half))) == 0


def test_bf16_weights_are_packed_only_where_onednn_supports_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gym_llm.policy import packed_linear

    layer = nn.Linear(4, 4).to(torch.bfloat16).requires_grad_(False)
    monkeypatch.setattr(packed_linear, "_bf16_packing", lambda: False)
    assert not packed_linear._packable(layer)  # an AVX2 CPU: oneDNN would raise
    monkeypatch.setattr(packed_linear, "_bf16_packing", lambda: True)
    assert packed_linear._packable(layer)
    assert packed_linear._packable(nn.Linear(4, 4).requires_grad_(False))  # float32: always


def test_only_inputs_with_few_rows_take_the_packed_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Prompt passes (many rows, a new width each time) stay on the ordinary path: oneDNN keeps a
    kernel per input shape, which grew memory without end."""
    seen: list[tuple[int, ...]] = []
    real = torch.ops.mkldnn._linear_pointwise

    def spy(x: torch.Tensor, *args: object) -> torch.Tensor:
        seen.append(tuple(x.shape))
        return real(x, *args)  # type: ignore[no-any-return]

    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", spy)
    layer = nn.Linear(16, 8).requires_grad_(False)
    packed = PackedLinears(nn.Sequential(layer))
    with torch.no_grad(), packed.active():
        layer(torch.ones(4, 1, 16))  # a decode step: 4 rows
        layer(torch.ones(1, PACKED_MAX_ROWS, 16))  # at the limit
        wide = torch.randn(4, PACKED_MAX_ROWS, 16)  # a prompt pass
        out = layer(wide)
    assert seen == [(4, 1, 16), (1, PACKED_MAX_ROWS, 16)]
    assert torch.equal(out, nn.Linear.forward(layer, wide))
