"""``benchmarks/learning_sweep.py``: seed lists and the margins it reports (no training here)."""

from __future__ import annotations

from benchmarks.cli_args import seed_list as _seeds
from benchmarks.learning_sweep import summarize


def test_seed_lists() -> None:
    assert _seeds("0-3") == [0, 1, 2, 3]
    assert _seeds("0,3,7") == [0, 3, 7]


def test_summary_reports_the_worst_seed() -> None:
    runs = [
        {"mode": "choice", "curve": [0.7, 1.0, 0.68, 1.0], "first_at_0_9": 1000, "passed": True},
        {"mode": "choice", "curve": [1.0, 1.0, 1.0, 0.95], "first_at_0_9": 500, "passed": True},
        {"mode": "generate", "curve": [0.3, 0.5, 0.6, 0.6], "first_at_0_9": None, "passed": False},
    ]
    summary = summarize(runs)
    assert summary["choice"] == {
        "runs": 2,
        "passed": 2,
        "worst_best": 1.0,
        "worst_final": 0.95,
        "worst_after_reaching": 0.68,
        "latest_first_at_0_9": 1000,
    }
    assert summary["generate"]["passed"] == 0 and summary["generate"]["latest_first_at_0_9"] is None
