"""``benchmarks/recipes/learn.py`` end to end on a tiny model: JSON + PNG under --out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.recipes.learn import build_parser, config_from_args, main, result_name


def test_learn_writes_json_and_png(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = main(
        [
            "--policy.model",
            str(tiny_model_dir),
            "--timesteps",
            "32",
            "--n-envs",
            "2",
            "--ppo.n-steps",
            "8",
            "--ppo.batch_size",
            "8",
            "--ppo.micro-batch-size",
            "8",
            "--eval-episodes",
            "4",
            "--eval-points",
            "1",
            "--device",
            "cpu",
            "--out",
            str(tmp_path / "results"),
            "--run-dir",
            str(tmp_path / "run"),
            "--no-progress",
            "--target",
            "-1.0",
        ]
    )
    name = result_name(
        config_from_args(build_parser().parse_args(["--policy.model", str(tiny_model_dir)]))
    )
    saved = json.loads((tmp_path / "results" / f"{name}.json").read_text())
    assert saved == json.loads(json.dumps(data))
    assert saved["config"]["env_kwargs"] == {"sab": False}  # the script's default env
    assert saved["optimum"] == pytest.approx(-0.0466, abs=5e-4)
    assert saved["random"] == pytest.approx(-0.396, abs=1e-3)
    point = saved["curve"][-1]
    assert point["exact"] is not None and point["monte_carlo"]["episodes"] == 4
    assert (tmp_path / "results" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    # Every return of Blackjack is >= -1: reached before any training.
    assert saved["target"] == -1.0
    assert saved["time_to_target"] == {"env_steps": 0, "wall_s": saved["curve"][0]["wall_s"]}
    out = capsys.readouterr().out
    assert "before:" in out and "after:" in out and "steps/s" in out
    assert "time to target -1.0: 0 env steps" in out


def test_help_lists_every_flag_with_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    text = capsys.readouterr().out
    for flag in ("--env", "--timesteps", "--policy.action-mode", "--ppo.learning-rate", "--out"):
        assert flag in text
    assert "default: 2048" in text
