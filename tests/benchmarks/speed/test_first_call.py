"""``benchmarks/speed/first_call.py`` runs end to end on a tiny model and writes what it promises."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.speed.first_call import main


@pytest.mark.parametrize("mode", ["choice", "generate"])
def test_first_call_splits_learn_and_compares_with_the_naive_loop(
    tiny_model_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    one_torch_thread: None,
    mode: str,
) -> None:
    out = tmp_path / "first.json"
    result = main(
        [
            "--model", str(tiny_model_dir), "--mode", mode, "--n-envs", "2", "--n-steps", "2",
            "--batch-size", "4", "--steps", "4", "--naive-steps", "2", "--max-new-tokens", "3",
            "--device", "cpu", "--set", "policy.trainable_layers=1", "ppo.n_epochs=1",
            "--json", str(out),
        ]
    )  # fmt: skip
    saved = json.loads(out.read_text())
    assert saved == json.loads(json.dumps(result))
    for call in ("first_call", "warm_call"):
        figures = saved[call]
        assert figures["rollout_s"] > 0 and figures["update_s"] > 0
        assert figures["total_s"] == pytest.approx(figures["rollout_s"] + figures["update_s"])
        assert figures["env_steps_per_s"] == pytest.approx(4 / figures["total_s"])
    assert saved["settings"]["policy"] == {"trainable_layers": 1}
    assert saved["settings"]["n_epochs"] == 1
    assert len(saved["naive_blocks"]) == 2 and saved["naive_env_steps_per_s"] > 0
    assert saved["first_call_vs_naive"] == pytest.approx(
        saved["first_call"]["env_steps_per_s"] / saved["naive_env_steps_per_s"]
    )
    assert saved["peak_rss_mb"] > 0 and saved["mode"] == mode
    text = capsys.readouterr().out
    assert "first learn()" in text and "warm learn()" in text and "naive loop" in text
