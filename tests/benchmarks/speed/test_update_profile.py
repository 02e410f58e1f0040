"""The update profile: padding arithmetic, and one profiled update of a tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.speed.update_profile import main, padding_share


def test_padding_share_is_the_padded_positions_share() -> None:
    assert padding_share([(4, 6), (4, 4)]) == pytest.approx(1 - 8 / 10)
    assert padding_share([]) is None


def test_one_profiled_update_counts_passes_operators_and_syncs(
    tiny_model_dir: Path, tmp_path: Path, one_torch_thread: None
) -> None:
    out = tmp_path / "profile.json"
    row = main(["--model", str(tiny_model_dir), "--n-envs", "2", "--n-steps", "4",
                "--set", "ppo.batch_size=4", "ppo.n_epochs=2", "--json", str(out)])  # fmt: skip
    assert row["optimizer_steps"] == 4  # 8 turns / 4 per minibatch x 2 epochs
    assert row["passes"] >= row["optimizer_steps"] and row["rows_per_pass"] >= 1
    assert row["operators"] > row["passes"] and row["host_syncs"] > 0
    assert row["padding_share"] is not None and 0.0 <= row["padding_share"] < 1.0
    assert 0.0 < row["in_operators_s"] <= row["update_s"]
    assert json.loads(out.read_text())["turns"] == 8
