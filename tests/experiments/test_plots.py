from __future__ import annotations

from pathlib import Path

from gym_llm.experiments.plots import Series, plot_curves


def test_plot_curves_writes_a_png(tmp_path: Path) -> None:
    path = plot_curves(
        [
            Series("agent", [0, 100, 200], [-0.4, -0.2, -0.1], [0.05, 0.04, 0.03]),
            Series("exact", [0, 200], [-0.3, -0.05]),
        ],
        tmp_path / "sub" / "curve.png",
        title="Blackjack",
        references={"optimum": -0.047, "random": -0.4},
    )
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
