"""``benchmarks/speed/estimator_cost.py``: each estimator's learn() blocks, side by side."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.speed.estimator_cost import main


def test_each_estimator_is_timed_with_its_ratio_to_the_first(
    tiny_model_dir: Path, tmp_path: Path, one_torch_thread: None
) -> None:
    out = main(
        [
            "--model", str(tiny_model_dir), "--env", "gym_llm/HighLow-v0", "--env-kwargs",
            "--n-envs", "2", "--n-steps", "2", "--repeats", "2", "--estimators", "gae", "q",
            "--json", str(tmp_path / "cost.json"),
        ]
    )  # fmt: skip
    assert json.loads((tmp_path / "cost.json").read_text()) == json.loads(json.dumps(out))
    for estimator in ("gae", "q"):
        assert len(out[estimator]["blocks"]) == 2
        assert all(b["rollout_s"] > 0 and b["update_s"] > 0 for b in out[estimator]["blocks"])
    assert out["gae"]["rollout_s_over_gae"] == 1.0
    assert out["q"]["rollout_s_over_gae"] > 0
