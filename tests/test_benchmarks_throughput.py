"""``benchmarks/throughput.py`` runs end to end on a tiny model and writes every promised key."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from benchmarks.throughput import build_parser, main, update_flops

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
    switches = {"choice": {"prefix", "packed"}, "generate": {"prefix", "reserve", "packed"}}
    assert set(data["switched_off"]) == switches[mode]
    assert data["switched_off"]["prefix"]["shared_prefix_tokens"] == 0  # really switched off
    assert data["packed_weight_mb"] > 0 and data["switched_off"]["packed"]["packed_weight_mb"] == 0
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


def test_update_flops_counts_lora_backward_once() -> None:
    """4 N per token for forward + activation gradients, plus 2 N_trainable for weight grads."""
    import torch
    from torch import nn

    class Fake(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(10, 4)  # 40, tied: counts as the LM head
            self.frozen = nn.Linear(4, 4, bias=False)  # 16
            self.frozen.weight.requires_grad_(False)
            self.lora = nn.Linear(4, 1, bias=False)  # 4, trainable

        def get_input_embeddings(self) -> nn.Module:
            return self.embed

        def get_output_embeddings(self) -> nn.Module:
            return self.embed

    class FakePolicy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lm = Fake()
            self.lm.embed.weight.requires_grad_(False)

    flops = update_flops(FakePolicy(), computed_tokens=3)
    assert flops == 3 * (4 * 60 + 2 * 4)
    assert torch.is_grad_enabled()
