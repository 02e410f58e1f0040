"""``benchmarks/speed/data_parallel.py``: its table is right by hand, and it runs end to end (slow: three
``torchrun`` jobs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.speed.data_parallel import main, table


def test_the_table_gives_ratios_to_the_first_job() -> None:
    rows = [
        {"processes": 1, "n_envs_per_process": 4, "env_steps": 64, "updates": 2, "wall_s": 32.0,
         "env_steps_per_s": 2.0},
        {"processes": 2, "n_envs_per_process": 4, "env_steps": 64, "updates": 1, "wall_s": 20.0,
         "env_steps_per_s": 3.2},
    ]  # fmt: skip
    lines = table(rows).splitlines()
    assert lines[2].endswith("| 2.00 | 1.00 |") and lines[3].endswith("| 3.20 | 1.60 |")


@pytest.mark.slow
def test_the_benchmark_runs_three_jobs(tiny_model_dir: Path, tmp_path: Path) -> None:
    result = main(
        [
            "--model", str(tiny_model_dir), "--env", "gym_llm/KeywordBandit-v0", "--env-kwargs",
            "--n-envs", "2", "--n-steps", "2", "--timesteps", "16", "--out", str(tmp_path),
        ]
    )  # fmt: skip
    saved = json.loads((tmp_path / "data_parallel.json").read_text())
    assert [(r["processes"], r["n_envs_per_process"]) for r in saved["rows"]] == [
        (1, 2), (1, 4), (2, 2)
    ]  # fmt: skip
    assert all(r["env_steps"] >= 16 and r["env_steps_per_s"] > 0 for r in result["rows"])
