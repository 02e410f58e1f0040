"""``benchmarks/throughput.py`` runs end to end on a tiny model and writes every promised key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.throughput import main


@pytest.mark.parametrize("mode", ["choice", "generate"])
def test_throughput_writes_the_promised_keys(
    tiny_model_dir: Path, tmp_path: Path, mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "t.json"
    main(
        [
            "--model",
            str(tiny_model_dir),
            "--mode",
            mode,
            "--n-envs",
            "4",
            "--steps",
            "16",
            "--naive-steps",
            "3",
            "--max-new-tokens",
            "3",
            "--device",
            "cpu",
            "--json",
            str(out),
        ]
    )
    data = json.loads(out.read_text())
    for key in (
        "rollout_env_steps_per_s",
        "naive_env_steps_per_s",
        "speedup_vs_naive",
        "update_tokens_per_s",
        "learn_env_steps_per_s",
        "peak_rss_mb",
        "peak_cuda_mb",
        "device",
        "model",
        "mode",
        "n_envs",
    ):
        assert key in data, key
    assert data["mode"] == mode and data["n_envs"] == 4 and data["peak_cuda_mb"] is None
    for key in ("rollout_env_steps_per_s", "naive_env_steps_per_s", "update_tokens_per_s"):
        assert data[key] > 0
    assert data["speedup_vs_naive"] == pytest.approx(
        data["rollout_env_steps_per_s"] / data["naive_env_steps_per_s"]
    )
    assert data["details"]["prefix_cache"]["shared_prefix_tokens"] > 0
    assert data["details"]["no_prefix_cache"]["shared_prefix_tokens"] == 0
    assert "rollout speed-up vs naive" in capsys.readouterr().out
    if mode == "generate":
        assert data["reply_tokens_per_s"] > 0 and data["naive_reply_tokens_per_s"] > 0
