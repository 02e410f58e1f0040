"""``benchmarks/speed/logprob_gap.py``: rollout vs update log-probs, measured with a non-zero adapter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.speed.logprob_gap import main


@pytest.mark.parametrize("mode", ["choice", "generate"])
def test_gap_is_measured_and_tiny_on_a_tiny_model(
    tiny_model_dir: Path, tmp_path: Path, mode: str
) -> None:
    out = tmp_path / "gap.json"
    result = main(
        [
            "--model",
            str(tiny_model_dir),
            "--mode",
            mode,
            "--n-envs",
            "3",
            "--batches",
            "2",
            "--max-new-tokens",
            "4",
            "--lora-b-std",
            "0.5",
            "--device",
            "cpu",
            "--json",
            str(out),
        ]
    )
    assert json.loads(out.read_text()) == result
    for name in ("default", "packed_weights_off"):
        gaps = result[name]
        assert gaps["tokens"] >= 6  # at least one token per reply, two batches of three
        assert 0 <= gaps["mean_abs_gap"] <= gaps["max_abs_gap"] < 1e-5
        assert gaps["max_value_gap"] < 1e-5
