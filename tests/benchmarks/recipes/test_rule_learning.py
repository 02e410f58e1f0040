"""``benchmarks/recipes/rule_learning.py`` runs end to end on a tiny model and reports every figure."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.recipes.rule_learning import main


def test_rule_learning_reports_exact_success_and_diagnostics(
    tiny_model_dir: Path, tmp_path: Path, one_torch_thread: None
) -> None:
    out = tmp_path / "rule.json"
    result = main(
        [
            "--model", str(tiny_model_dir), "--n-envs", "2", "--n-steps", "2", "--batch-size",
            "4", "--steps", "8", "--every", "4", "--set", "policy.choice_calibration=true",
            "ppo.n_epochs=1", "--json", str(out),
        ]
    )  # fmt: skip
    saved = json.loads(out.read_text())
    assert saved == json.loads(json.dumps(result))
    curve = saved["curve"]
    assert [row["env_steps"] for row in curve] == [0, 4, 8]
    for row in curve:
        assert row["success"] in {i / 10 for i in range(11)}
    for key in ("state_entropy", "mutual_information", "greedy_changed", "explained_variance"):
        assert key in curve[-1]
    assert saved["settings"]["set"] == {
        "policy": {"choice_calibration": True},
        "ppo": {"n_epochs": 1},
    }
    assert curve[-1]["train_s"] > 0
