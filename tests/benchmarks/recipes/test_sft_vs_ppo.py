"""``benchmarks/recipes/sft_vs_ppo.py`` end to end on a tiny model: both runs, JSON + PNG under --out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.recipes.sft_vs_ppo import build_parser, config_from_args, main, result_name

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_sft_vs_ppo_writes_json_and_png(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # KeywordBandit: exact evaluation and balanced demos take 4 questions, not Blackjack's 280.
    argv = [
        "--env",
        "gym_llm/KeywordBandit-v0",
        "--policy.model",
        str(tiny_model_dir),
        "--timesteps",
        "8",
        "--n-envs",
        "2",
        "--ppo.n-steps",
        "4",
        "--ppo.batch-size",
        "8",
        "--ppo.micro-batch-size",
        "8",
        "--sft-epochs",
        "2",
        "--sft-learning-rate",
        "1e-3",
        "--device",
        "cpu",
        "--out",
        str(tmp_path / "results"),
        "--run-dir",
        str(tmp_path / "run"),
        "--no-progress",
    ]
    data = main(argv)
    name = result_name(config_from_args(build_parser().parse_args(argv)))
    saved = json.loads((tmp_path / "results" / f"{name}.json").read_text())
    assert saved == json.loads(json.dumps(data))
    summary = saved["summary"]
    assert summary["optimum_return"] == 1.0 and summary["random_return"] == 0.25
    assert summary["ppo_timesteps"] == 8
    assert saved["demos"] == {
        "path": str(tmp_path / "run" / "demos-balanced.jsonl"),
        "lines": 4,
        "balanced": True,
    }
    ppo, sft_ppo = saved["runs"]["PPO alone"], saved["runs"]["SFT then PPO"]
    # Same base model and seed: the same "before"; only the second run has an SFT step.
    assert ppo["before"]["exact"] == sft_ppo["before"]["exact"] == summary["before"]
    assert ppo["sft"] is None and sft_ppo["sft"]["sft/steps"] == 2  # 2 epochs of 1 batch
    assert sft_ppo["after_sft"]["exact"] == summary["sft_after"]
    assert (tmp_path / "results" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    assert "then PPO" in capsys.readouterr().out


def test_help_lists_every_flag_with_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    text = capsys.readouterr().out
    for flag in ("--sft-epochs", "--sft-learning-rate", "--episode-demos", "--timesteps"):
        assert flag in text
    assert "(default: 128)" in text and "(default: Blackjack-v1)" in text
    assert "(default: sab=False)" in text and "(default: 16)" in text[text.index("--ppo.n-steps") :]
