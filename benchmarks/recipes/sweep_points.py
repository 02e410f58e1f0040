"""Every evaluation point of a sweep, on disk the moment it is measured.

A sweep file (``family_sweep``'s ``--jsonl``) gets one row per *finished* run. A run stopped short
(a GPU lease that ends, a killed process) used to leave its curve only in a progress log. Each
point is now also appended to a points file beside the sweep file (``NAME.points.jsonl``), and
:func:`partial_rows` turns the points of runs that never wrote a row back into rows, marked
``cut_short``, so that they can be summarised and plotted apart from the finished ones.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.cli_args import append_jsonl

#: Keys of a point that stay out of the points file (large; the finished row keeps them).
_HEAVY = ("replies",)


def points_path(jsonl: Path) -> Path:
    """``runs.jsonl`` -> ``runs.points.jsonl``, in the same folder."""
    return jsonl.with_name(f"{jsonl.stem}.points.jsonl")


def append_point(path: Path, task: str, seed: int, arm: str, point: dict[str, Any]) -> None:
    """One line per point, flushed at once: a process killed a second later loses nothing."""
    light = {k: v for k, v in point.items() if k not in _HEAVY}
    append_jsonl(path, {"task": task, "seed": seed, "arm": arm, "point": light})


def reached_at(curve: list[dict[str, Any]], target: float) -> int | None:
    """The first evaluated env step at which a run's greedy gap was at least ``target``."""
    return next((p["env_steps"] for p in curve if p["gap"] >= target), None)


def gap_at(curve: list[dict[str, Any]], env_steps: int) -> float | None:
    """The greedy gap of the last point at or before ``env_steps``; None if the run never got
    that far (its last point is earlier)."""
    if not curve or curve[-1]["env_steps"] < env_steps:
        return None
    return float([p for p in curve if p["env_steps"] <= env_steps][-1]["gap"])


def held(curve: list[dict[str, Any]], budget: int, target: float) -> bool | None:
    """At the target at the budget *and* at twice it: reaching once and falling back is not
    learning a task. None for a run that stopped before twice the budget."""
    at_budget, at_twice = gap_at(curve, budget), gap_at(curve, 2 * budget)
    if at_budget is None or at_twice is None:
        return None
    return at_budget >= target and at_twice >= target


def partial_rows(
    path: Path, finished: list[dict[str, Any]], target: float = 0.9
) -> list[dict[str, Any]]:
    """Rows for the runs in a points file that have no finished row, shaped like finished rows
    (``curve``, ``start_gap``, ``best_gap``, ``final_gap``, ``reached_at``) with
    ``cut_short=True``. A run resumed after being cut short starts its points again; only the
    last attempt (from its last env-step-0 point) counts."""
    done = {(r["task"], r["seed"], r["arm"]) for r in finished}
    curves: dict[tuple[str, int, str], list[dict[str, Any]]] = defaultdict(list)
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        entry = json.loads(line)
        key = (entry["task"], entry["seed"], entry["arm"])
        if key in done:
            continue
        if entry["point"]["env_steps"] == 0:
            curves[key] = []
        curves[key].append(entry["point"])
    rows = []
    for (task, seed, arm), curve in curves.items():
        gaps = [p["gap"] for p in curve]
        rows.append({
            "task": task, "seed": seed, "arm": arm, "cut_short": True, "curve": curve,
            "start_gap": gaps[0], "best_gap": max(gaps), "final_gap": gaps[-1],
            "reached_at": reached_at(curve, target),
        })  # fmt: skip
    return rows
