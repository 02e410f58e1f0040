"""The examples run: blackjack.py end to end on a tiny model, text_world.py's missing-extra help."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from gym_llm.evaluation.exact import blackjack_states
from tests.paths import ROOT

EXAMPLES = ROOT / "examples"


def _example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_blackjack_example_trains_and_prints_exact_value(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blackjack = _example("blackjack")
    blackjack.main(
        [
            "--model",
            str(tiny_model_dir),
            "--device",
            "cpu",
            "--episodes",
            "4",
            "--batch-size",
            "2",
            "--max-new-tokens",
            "3",
            "--ppo-epochs",
            "1",
            "--skip-baseline",
            "--save",
            str(tmp_path / "agent"),
        ]
    )
    out = capsys.readouterr().out
    assert out.count("update: mean return") == 2
    match = re.search(r"greedy strategy: ([-+]\d\.\d+)", out)
    assert match is not None and -1.0 <= float(match.group(1)) <= 1.0
    chart = out[out.index("dealer:") :].strip().splitlines()
    assert len(chart) == 1 + 28  # header, hard 4-21, soft 12-21
    assert (tmp_path / "agent" / "agent.json").is_file()
    loaded = blackjack.BlackjackAgent.load(tmp_path / "agent", device="cpu")
    assert len(loaded.predict(blackjack_states()[:3])) == 3


def test_blackjack_help_shows_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        _example("blackjack").main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--model", "--device", "--episodes", "--batch-size", "--sft-warm-start"):
        assert flag in out
    assert "(default: smollm2-135m)" in out


def test_text_world_without_the_extra_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    text_world = _example("text_world")
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name == "textworld" else real_find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(SystemExit) as exit_info:
        text_world.main(["--episodes", "1"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert 'pip install "gym_llm[textworld]"' in err
    assert "C compiler" in err and "jericho" in err


def test_text_world_agent_reads_commands() -> None:
    text_world = _example("text_world")
    assert text_world.TextWorldAgent.extract_action(None, "> Open the chest.\nthen go") == (
        "open the chest"
    )
    assert text_world.TextWorldAgent.extract_action(None, "  \n ") is None


def test_text_world_commands_are_printable_ascii_of_sane_length() -> None:
    # textworld 1.7.0's interpreter hangs on a NUL byte; an untrained model's bytes crashed it.
    text_world = _example("text_world")
    extract = text_world.TextWorldAgent.extract_action
    assert extract(None, "go\x00 north\x07\u4e2d") == "go north"
    assert extract(None, "\x00\x01") is None
    assert len(extract(None, "x" * 500)) == text_world.MAX_COMMAND_CHARS
