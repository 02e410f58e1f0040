"""``benchmarks/recipes/dqn_learning_test_sweep.py``: one seed's row, as the sweep records it."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.recipes.dqn_learning_test_sweep import main


def test_one_seed_is_recorded_from_its_measured_start(tmp_path: Path) -> None:
    rows = main(["--seeds", "1", "--json", str(tmp_path / "sweep.json")])
    assert json.loads((tmp_path / "sweep.json").read_text()) == rows
    (row,) = rows
    assert row["seed"] == 0 and row["start"] <= 0.6 and row["at_512"] == 1.0
