"""``benchmarks/speed/throughput.py`` runs end to end on a tiny model and writes every promised key."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from benchmarks.speed.throughput import build_parser, main, update_flops

PROMISED = (
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
)


def _run(model_dir: Path, out: Path, mode: str, *extra: str) -> dict[str, Any]:
    main(
        [
            "--model",
            str(model_dir),
            "--mode",
            mode,
            "--n-envs",
            "2",
            "--steps",
            "8",
            "--naive-steps",
            "2",
            "--repeats",
            "2",
            "--max-new-tokens",
            "3",
            "--device",
            "cpu",
            "--no-progress",
            "--json",
            str(out),
            *extra,
        ]
    )
    data: dict[str, Any] = json.loads(out.read_text())
    return data


@pytest.mark.parametrize("mode", ["choice", "generate"])
def test_throughput_writes_the_promised_keys(
    tiny_model_dir: Path, tmp_path: Path, mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _run(tiny_model_dir, tmp_path / "t.json", mode)
    for key in PROMISED:
        assert key in data, key
    assert data["mode"] == mode and data["n_envs"] == 2 and data["peak_cuda_mb"] is None
    for key in ("rollout_env_steps_per_s", "naive_env_steps_per_s", "update_tokens_per_s"):
        assert data[key] > 0
    assert data["peak_rss_mb"] > 0 and data["update_mfu"] is None  # no peak known for a CPU
    # Interleaved rounds: figures are medians, the speed-up is the ratio of the medians.
    rounds = data["rounds"]
    assert len(rounds["gym_llm"]) == len(rounds["naive"]) == 2 == data["repeats"]
    assert data["rollout_env_steps_per_s"] == pytest.approx(
        statistics.median(r["rollout_env_steps_per_s"] for r in rounds["gym_llm"])
    )
    assert data["speedup_vs_naive"] == pytest.approx(
        data["rollout_env_steps_per_s"] / data["naive_env_steps_per_s"]
    )
    assert len(data["speedup_vs_naive_per_round"]) == 2
    assert data["shared_prefix_tokens"] > 0
    switches = {
        "choice": {"prefix", "packed", "reuse", "memo", "micro"},
        "generate": {"prefix", "reserve", "packed", "reuse", "micro"},
    }
    assert set(data["switched_off"]) == switches[mode]
    assert data["switched_off"]["prefix"]["shared_prefix_tokens"] == 0  # really switched off
    assert data["packed_weight_mb"] > 0 and data["switched_off"]["packed"]["packed_weight_mb"] == 0
    assert data["update_tflops_per_s"] > 0
    assert data["mean_reply_tokens"] > 0 and 0 < data["naive_mean_reply_tokens"] <= 3
    assert "rollout speed-up vs naive" in capsys.readouterr().out
    if mode == "generate":
        assert data["mean_reply_tokens"] <= 3  # the same reply budget as the naive loop
        assert data["reply_tokens_per_s"] > 0 and data["naive_reply_tokens_per_s"] > 0


def test_compare_can_be_turned_off_and_checks_the_mode(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    data = _run(tiny_model_dir, tmp_path / "t.json", "choice", "--compare")
    assert data["switched_off"] == {}
    with pytest.raises(ValueError, match="does not apply to choice mode"):
        _run(tiny_model_dir, tmp_path / "u.json", "choice", "--compare", "reserve")


def test_help_shows_repeats_with_its_default() -> None:
    text = build_parser().format_help()
    assert "--repeats" in text and "(default: 3)" in text


def test_update_flops_counts_the_work_done() -> None:
    """2 x forward (forward + activation gradients) + 2 N_trainable per trained token."""
    from torch import nn

    from gym_llm.policy.llm_policy import UpdateWork
    from gym_llm.testing import make_tiny_model

    class FakePolicy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lm = make_tiny_model(100, hidden_size=32, layers=2)
            for param in self.lm.parameters():
                param.requires_grad_(False)
            self.lm.model.layers[1].self_attn.q_proj.weight.requires_grad_(True)  # 32 x 32

    per_layer = 4 * 32 * 32 + 3 * 32 * 64  # q, k, v, o + gate, up, down
    work = UpdateWork(token_layers=10, head_rows=3, tokens=5)
    forward = 2 * (10 * per_layer + 3 * 100 * 32)
    assert update_flops(FakePolicy(), work) == 2 * forward + 2 * 1024 * 5
