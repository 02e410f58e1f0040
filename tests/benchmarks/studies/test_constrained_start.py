"""``benchmarks/studies/constrained_start.py``: each state's constrained reply odds on a tiny model,
the three ways; calibrated, the odds are a distribution over the actions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from benchmarks.studies.constrained_start import WAYS, main
from tests.models import tiny_model_fixture

words_model_dir = tiny_model_fixture("words_model_dir", ["low", "high"])


def test_the_three_starts_of_a_task(words_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "start.json"
    rows = main(["--tasks", "threshold-p0-s0", "--model", str(words_model_dir), "--json", str(out)])
    assert json.loads(out.read_text()) == rows and len(rows) == len(WAYS)
    for row in rows:
        assert row["actions"] == ["low", "high"] and row["states"] == 10
        np.testing.assert_allclose(row["sum_of_probs"], 1.0, atol=1e-3)  # every reply an action
        assert 0.0 < row["valid_mass"] <= 1.0
    assert [(r["prior_scale"], r["calibration"]) for r in rows] == [(s, c) for _, s, c in WAYS]
