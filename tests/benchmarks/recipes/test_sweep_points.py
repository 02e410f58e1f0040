"""The points file: every point on disk as measured, and cut-short runs read back as rows."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.recipes.sweep_points import append_point, partial_rows, points_path


def _point(steps: int, gap: float) -> dict[str, object]:
    return {"env_steps": steps, "gap": gap, "value": gap, "replies": {"big": [1] * 50}}


def test_points_path_sits_beside_the_sweep_file() -> None:
    assert points_path(Path("a/b/tuning.jsonl")) == Path("a/b/tuning.points.jsonl")


def test_append_point_keeps_the_replies_out(tmp_path: Path) -> None:
    path = tmp_path / "s.points.jsonl"
    append_point(path, "threshold-p0-s0", 3, "arm", _point(128, 0.5))
    (entry,) = [json.loads(line) for line in path.read_text().splitlines()]
    assert entry["task"] == "threshold-p0-s0" and entry["seed"] == 3 and entry["arm"] == "arm"
    assert entry["point"] == {"env_steps": 128, "gap": 0.5, "value": 0.5}


def test_partial_rows_skip_finished_runs_and_keep_the_last_attempt(tmp_path: Path) -> None:
    path = tmp_path / "s.points.jsonl"
    for steps, gap in [(0, 0.0), (128, 0.95), (256, 0.4)]:
        append_point(path, "t", 0, "a", _point(steps, gap))  # finished: has a row
    for steps, gap in [(0, 0.0), (128, 1.0)]:
        append_point(path, "t", 1, "a", _point(steps, gap))  # a first attempt, cut short
    for steps, gap in [(0, 0.1), (128, 0.3), (256, 0.92)]:
        append_point(path, "t", 1, "a", _point(steps, gap))  # resumed from the start
    finished = [{"task": "t", "seed": 0, "arm": "a"}]
    (row,) = partial_rows(path, finished, target=0.9)
    assert row["seed"] == 1 and row["cut_short"] is True
    assert [p["env_steps"] for p in row["curve"]] == [0, 128, 256]
    assert (row["start_gap"], row["best_gap"], row["final_gap"]) == (0.1, 0.92, 0.92)
    assert row["reached_at"] == 256
    assert partial_rows(path, finished, target=0.95)[0]["reached_at"] is None


def test_held_needs_the_target_at_the_budget_and_at_twice_it() -> None:
    from benchmarks.recipes.sweep_points import gap_at, held

    def curve(gaps: list[float]) -> list[dict[str, float]]:
        return [{"env_steps": 256 * i, "gap": g} for i, g in enumerate(gaps)]

    # budget 512: points at 512 and 1,024
    assert held(curve([0.0, 0.5, 0.95, 0.7, 0.91]), 512, 0.9) is True  # dips between: held
    assert held(curve([0.0, 0.95, 0.85, 0.95, 0.95]), 512, 0.9) is False  # below at the budget
    assert held(curve([0.0, 0.5, 0.95, 0.95, 0.89]), 512, 0.9) is False  # fell back by 2x
    assert held(curve([0.0, 0.5, 0.95, 0.95]), 512, 0.9) is None  # stopped before 2x
    # a point that falls between evaluations reads the last one before it
    assert gap_at(curve([0.0, 0.3, 0.6]), 300) == 0.3
    assert gap_at(curve([0.0, 0.3]), 300) is None
