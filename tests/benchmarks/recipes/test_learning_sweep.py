"""``benchmarks/recipes/learning_sweep.py``: seed lists, the margins it reports and the PPO arguments it
passes (no training here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks.cli_args import seed_list as _seeds
from benchmarks.recipes import learning_sweep
from benchmarks.recipes.learning_sweep import load_runs, main, one_run, summarize


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


def test_ppo_arguments_reach_the_highlow_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks.recipes import learning_recipes

    seen: list[dict[str, Any]] = []

    def fake_train(tmp_path: Path, seed: int, **kwargs: Any) -> tuple[float, list[float]]:
        seen.append(kwargs)
        return 0.5, [0.6, 0.9]

    monkeypatch.setattr(learning_recipes, "train_high_low", fake_train)
    run = one_run("corner-target", 3, {"n_epochs": 4})
    assert seen[-1]["n_epochs"] == 4 and seen[-1]["policy_update"] == "target"
    assert run["ppo"] == {"n_epochs": 4} and run["curve"] == [0.6, 0.9]
    one_run("head", 3, None)
    assert "n_epochs" not in seen[-1] and seen[-1]["head"] is True


def test_jsonl_keeps_each_run_and_a_rerun_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[tuple[str, int]] = []

    def fake_run(mode: str, seed: int, ppo: dict[str, Any] | None = None) -> dict[str, Any]:
        started.append((mode, seed))
        return {"mode": mode, "seed": seed, "ppo": ppo or {}, "before": 0.5, "curve": [0.5, 0.9],
                "first_at_0_9": 1024, "passed": True, "seconds": 1.0}  # fmt: skip

    class InProcess:  # the pool, without processes (the fake cannot be pickled)
        def __init__(self, max_workers: int) -> None:
            pass

        def __enter__(self) -> InProcess:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def submit(self, fn: Any, *args: Any) -> Any:
            from concurrent.futures import Future

            future: Future[Any] = Future()
            future.set_result(fn(*args))
            return future

    monkeypatch.setattr(learning_sweep, "one_run", fake_run)
    monkeypatch.setattr(learning_sweep, "ProcessPoolExecutor", InProcess)
    jsonl = tmp_path / "sweep.jsonl"
    main(["--modes", "head", "--seeds", "0-1", "--jsonl", str(jsonl)])
    assert sorted((r["mode"], r["seed"]) for r in load_runs(jsonl)) == [("head", 0), ("head", 1)]
    result = main(["--modes", "head", "corner", "--seeds", "0-1", "--jsonl", str(jsonl)])
    assert started == [("head", 0), ("head", 1), ("corner", 0), ("corner", 1)]  # no rerun
    assert [(r["mode"], r["seed"]) for r in result["runs"]] == [
        ("head", 0), ("head", 1), ("corner", 0), ("corner", 1)
    ]  # fmt: skip
    assert result["summary"]["head"]["runs"] == 2 and len(load_runs(jsonl)) == 4
    main(["--modes", "head", "--seeds", "0", "--jsonl", str(jsonl), "--set", "ppo.n_epochs=2"])
    assert started[-1] == ("head", 0)  # other PPO arguments: another run
