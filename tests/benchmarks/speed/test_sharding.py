"""``benchmarks/speed/sharding.py``: its table is right by hand, its byte count is right on a tiny
agent, and it runs end to end (slow: two ``torchrun`` jobs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.speed.sharding import main, table


def _row(fsdp: bool, state: float, rss: float, speed: float) -> dict[str, object]:
    process = {
        "training_state_mb": state,
        "peak_rollout_mb": 100.0,
        "peak_update_mb": rss / 2,
        "peak_rss_mb": rss,
    }
    return {"fsdp": fsdp, "env_steps_per_s": speed, "per_process": [process, process]}


def test_the_table_gives_ratios_to_the_whole_weights() -> None:
    lines = table([_row(False, 400.0, 1000.0, 2.0), _row(True, 200.0, 800.0, 1.5)]).splitlines()
    assert lines[2] == (
        "| whole | 400 (1.00x) | 100 (1.00x) | 500 (1.00x) | 1000 (1.00x) | 2.00 (1.00x) |"
    )
    assert lines[3] == (
        "| sharded (FSDP) | 200 (0.50x) | 100 (1.00x) | 400 (0.80x) | 800 (0.80x) | 1.50 (0.75x) |"
    )


@pytest.mark.slow
def test_the_benchmark_runs_both_jobs(tiny_model_dir: Path, tmp_path: Path) -> None:
    main(
        [
            "--model", str(tiny_model_dir), "--env", "gym_llm/KeywordBandit-v0", "--env-kwargs",
            "--n-envs", "2", "--n-steps", "2", "--timesteps", "8", "--out", str(tmp_path),
        ]
    )  # fmt: skip
    rows = json.loads((tmp_path / "sharding.json").read_text())["rows"]
    whole, parts = ([p["training_state_mb"] for p in r["per_process"]] for r in rows)
    assert [r["fsdp"] for r in rows] == [False, True]
    for row in rows:  # each timed phase measured in each process
        assert all(p["peak_update_mb"] > 0 and p["peak_rollout_mb"] > 0 for p in row["per_process"])
    # Sharded: each process holds about half (FSDP pads the split to whole rows).
    assert max(parts) < 0.55 * whole[0] and sum(parts) >= 0.99 * whole[0]
