from __future__ import annotations

from pathlib import Path

import pytest

from gym_llm.demo import main, parse_env_kwargs


def test_env_kwargs_parsing() -> None:
    assert parse_env_kwargs(["sab=False", "n=3", "x=0.5", "map_name=8x8", "p=none"]) == {
        "sab": False,
        "n": 3,
        "x": 0.5,
        "map_name": "8x8",
        "p": None,
    }
    with pytest.raises(SystemExit, match="key=value"):
        parse_env_kwargs(["oops"])


def test_demo_plays_and_summarises(
    tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(
        [
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
