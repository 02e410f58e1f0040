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


def test_a_long_label_wraps_below_the_axes_and_keeps_the_figure_width(tmp_path: Path) -> None:
    label = (
        "auto, n_epochs 4, batch_size 64, ent_coef 0.0, policy.value_normalization True "
        "(choice, n_steps 8): mean of 7 seeds (to 4096, where every seed got)"
    )
    members = [([0, 100, 200], [-0.5, -0.2, -0.1]), ([0, 100], [-0.3, -0.2])]
    path = plot_curves(
        [Series(label, [0, 100], [-0.4, -0.2], [0.05, 0.04], members)],
        tmp_path / "long.png",
        title="TextMaze",
        references={"optimum": -0.1},
    )
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    # 7 inches at 120 dpi plus the tight box's margin; unwrapped, this label made it 1,207 px
    width = int.from_bytes(data[16:20], "big")
    assert width <= 7 * 120 + 40
