"""``benchmarks/speed/gpu_check.py``: the GPU checklist runs end to end (here on the CPU path, as a
machine without a GPU runs it) and appends its section to the results file."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.speed.gpu_check import main, sweep_line


def test_the_checklist_measures_every_item_and_appends_its_section(
    tiny_model_dir: Path, tmp_path: Path, one_torch_thread: None
) -> None:
    results = tmp_path / "RESULTS.md"
    results.write_text("# Results\n")
    out = main(
        [
            "--device", "cpu", "--model", str(tiny_model_dir), "--envs", "2", "4",
            "--n-steps", "2", "--seeds", "2", "--sweep-steps", "256",
            "--json", str(tmp_path / "gpu.json"), "--results", str(results),
        ]
    )  # fmt: skip
    assert json.loads((tmp_path / "gpu.json").read_text()) == json.loads(json.dumps(out))
    text = results.read_text()
    assert text.startswith("# Results\n") and "### GPU checklist — CPU" in text
    assert set(out["dtype"]) == {"fp32", "bf16"}
    assert out["dtype"]["fp32"]["first_ratio_error"] < 1e-4  # invariant 1 in fp32
    for row in out["dtype"].values():
        assert row["approx_kl"] == row["approx_kl"]  # logged, not NaN
    assert set(out["throughput"]) == {"2", "4"}
    for row in out["throughput"].values():
        assert row["rollout_env_steps_per_s"] > 0 and row["update_tokens_per_s"] > 0
        assert row["update_mfu"] is None and row["peak_rss_mb"] > 0  # no MFU without a GPU peak
    sweep = out["sweep"]
    assert sweep["seeds"] == 2 and [r["seed"] for r in sweep["runs"]] == [0, 1]
    assert all(len(r["values"]) == 2 for r in sweep["runs"])  # before and after 256 steps
    assert 0 <= sweep["reached"] <= 2 and sweep["optimum"] == 1.0
    assert f"{sweep['reached']} of 2 seeds reached the optimum" in text


def test_a_skipped_sweep_says_so_instead_of_zero_of_zero() -> None:
    skipped = {"optimum": 1.0, "reached": 0, "seeds": 0, "runs": []}
    assert sweep_line(skipped, 2048) == "FrozenLake sweep: skipped (`--seeds 0`)."
    ran = {"optimum": 1.0, "reached": 1, "seeds": 2, "runs": [
        {"seed": 0, "wall_s": 10.0, "values": [0.0, 1.0]},
        {"seed": 1, "wall_s": 30.0, "values": [0.0, 0.0]},
    ]}  # fmt: skip
    line = sweep_line(ran, 2048)
    assert "**1 of 2 seeds reached the optimum (1.00)**" in line
    assert "final values 1.00 / 0.00; 20 s per seed" in line
