"""``benchmarks/speed/memory.py`` runs end to end on a tiny model and its summary is right by hand."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.speed.memory import main, summary


def test_summary_fits_growth_after_the_warmup() -> None:
    rows = [
        {"update": u, "rss_mb": 100.0 + (2.0 * u if u > 2 else 50.0), "peak_mb": 300.0,
         "rss_trimmed_mb": 90.0 + u}
        for u in range(1, 11)
    ]  # fmt: skip
    figures = summary(rows, warmup=2)
    assert abs(figures["slope_mb_per_update"] - 2.0) < 1e-9
    assert abs(figures["trimmed_slope_mb_per_update"] - 1.0) < 1e-9
    assert figures["growth_after_warmup_mb"] == 120.0 - 106.0
    assert figures["peak_mb"] == 300.0


def test_memory_benchmark_writes_rows_and_a_figure(
    tiny_model_dir: Path, tmp_path: Path, one_torch_thread: None
) -> None:
    result = main(
        [
            "--model", str(tiny_model_dir), "--updates", "3", "--n-envs", "2", "--n-steps", "2",
            "--max-prompt-tokens", "1500", "--checkpoint-every", "2", "--threads", "1",
            "--out", str(tmp_path),
        ]
    )  # fmt: skip
    saved = json.loads((tmp_path / "memory.json").read_text())
    assert (
        [r["update"] for r in saved["rows"]] == [1, 2, 3] == [r["update"] for r in result["rows"]]
    )
    assert all(r["rss_mb"] > 0 and r["peak_mb"] >= r["rss_mb"] for r in saved["rows"])
    for row in saved["rows"]:  # the split (read after the trim) adds up to the trimmed RSS
        assert row["file_mb"] > 0 and row["anonymous_mb"] > 0
        total, trimmed = row["file_mb"] + row["anonymous_mb"], row["rss_trimmed_mb"]
        assert abs(total - trimmed) < 0.1 * trimmed
        assert not row["malloc_in_use_mb"] <= 0  # NaN without glibc
    assert (tmp_path / "memory.png").stat().st_size > 0
