"""Learning-curve PNGs: people would rather look at a curve than read a JSON of numbers.

matplotlib is an optional dependency (the ``bench`` extra, installed by ``make``): importing this
module never fails, and plotting without it raises an error that says how to install it.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Series:
    """One line on a plot: an agent's mean return (± a 95% band) against env steps, and
    optionally each seed's own curve (``members``: (steps, values) pairs), drawn thin beside
    it so that a seed that falls back is seen, not averaged away."""

    label: str
    steps: Sequence[float]
    means: Sequence[float]
    sems: Sequence[float] | None = None
    members: Sequence[tuple[Sequence[float], Sequence[float]]] = ()


#: Legend labels wrap at this many characters, and a legend with a longer one goes below the
#: axes, where it hides no curve.
LABEL_WIDTH = 60


def _pyplot() -> object:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: no display on servers and CI
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "Plotting needs matplotlib: pip install 'gym-llm[bench]' (make installs it)."
        ) from exc
    return plt


def plot_curves(
    series: Sequence[Series],
    path: str | Path,
    *,
    title: str,
    references: dict[str, float] | None = None,
    ylabel: str = "mean episode return",
) -> Path:
    """Plot ``series`` (with 95% bands where ``sems`` are given) and horizontal ``references``
    (e.g. ``{"optimum": -0.047, "random": -0.40}``) to ``path``; returns the path."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))  # type: ignore[attr-defined]
    for line in series:
        (drawn,) = ax.plot(
            line.steps, line.means, marker="o", label=textwrap.fill(line.label, LABEL_WIDTH)
        )
        for steps, values in line.members:
            ax.plot(steps, values, color=drawn.get_color(), alpha=0.35, linewidth=0.8)
        if line.sems is not None:
            low = [m - 1.96 * s for m, s in zip(line.means, line.sems, strict=True)]
            high = [m + 1.96 * s for m, s in zip(line.means, line.sems, strict=True)]
            ax.fill_between(line.steps, low, high, alpha=0.2)
    styles = iter(["--", ":", "-.", (0, (5, 5))])
    for name, value in (references or {}).items():
        ax.axhline(value, linestyle=next(styles, "--"), color="gray", label=f"{name} ({value:g})")
    ax.set_xlabel("env steps")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    crowded = len(series) + len(references or {}) > 5
    if crowded or any(len(line.label) > LABEL_WIDTH for line in series):  # below the axes
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.15), fontsize="small")
    else:
        ax.legend(loc="best", fontsize="small")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)  # type: ignore[attr-defined]
    return path
