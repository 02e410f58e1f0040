from __future__ import annotations

from pathlib import Path

import pytest

from gym_llm.cli.demo import main, parse_env_kwargs


def test_env_kwargs_parsing() -> None:
    assert parse_env_kwargs(["sab=False", "n=3", "x=0.5", "map_name=8x8", "p=none"]) == {
        "sab": False,
        "n": 3,
        "x": 0.5,
        "map_name": "8x8",
        "p": None,
    }
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        parse_env_kwargs(["oops"])


def test_zero_shot_demo_plays_and_summarises(
    tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(
        [
            "--zero-shot",
            "--env",
            "Blackjack-v1",
            "--env-kwargs",
            "sab=False",
            "--model",
            str(tiny_model_dir),
            "--episodes",
            "2",
            "--max-new-tokens",
            "4",
            "--device",
            "cpu",
        ]
    )
    out = capsys.readouterr().out
    assert "Your hand totals" in out and "Model reply:" in out and "Parsed action:" in out
    assert "mean return:" in out and "invalid-action rate:" in out


@pytest.mark.parametrize(
    "env_args, shows",
    [([], "Target:"), (["--env", "Blackjack-v1", "--env-kwargs", "sab=False"], "hard 12")],
)
def test_training_demo_reports_before_after_and_where_things_are(
    tiny_model_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    env_args: list[str],
    shows: str,
) -> None:
    main(
        [
            *env_args,
            "--model",
            str(tiny_model_dir),
            "--timesteps",
            "32",
            "--n-envs",
            "2",
            "--episodes",
            "1",
            "--device",
            "cpu",
            "--out",
            str(tmp_path / "demo"),
        ]
    )
    out = capsys.readouterr().out
    assert "eval before training: exact expected return" in out
    assert "before: exact expected return" in out and "after : exact expected return" in out
    assert "% of the random-to-optimum gap" in out
    assert shows in out and "=== Episode 1/1" in out  # Blackjack: the strategy chart
    assert f"--logdir {tmp_path / 'demo' / 'tensorboard'}" in out
    assert (tmp_path / "demo" / "agent" / "config.json").exists()
    assert f"best agent:     {tmp_path / 'demo' / 'best'}" in out
