"""``benchmarks.recipes.twx_heldout`` on a tiny model and the real TextWorld-Express: rows for random,
the untrained model and each score point, written as they come; a rerun skips finished runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.recipes import twx_heldout
from gym_llm.testing import save_tiny_model
from tests.real_packages import require


def test_a_short_run_writes_its_points_and_a_rerun_skips_it(
    tmp_path: Path, one_torch_thread: None
) -> None:
    require("textworld_express", java=True)
    model = save_tiny_model(tmp_path / "tiny", words=["take", "coin", "move", "look"])
    jsonl = tmp_path / "runs.jsonl"
    argv = [
        "--model", str(model), "--seeds", "0", "--timesteps", "16", "--eval-every", "8",
        "--eval-games", "2", "--step-limit", "3", "--n-envs", "2", "--n-steps", "4",
        "--batch-size", "8", "--device", "cpu", "--jsonl", str(jsonl),
    ]  # fmt: skip
    lines = twx_heldout.main(argv)
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [(r["agent"], r["env_steps"]) for r in rows] == [
        ("random", 0), ("llm", 0), ("llm", 8), ("llm", 16)
    ]  # fmt: skip
    assert rows[-1]["final"] and all(0.0 <= r["success"] <= 1.0 for r in rows)
    assert lines[0].startswith("coin: ") and "of 1 seeds" in lines[0]
    twx_heldout.main(argv)  # finished: nothing runs again
    assert len(jsonl.read_text().splitlines()) == len(rows)
    (png,) = twx_heldout.plot(jsonl, tmp_path / "plots")
    assert png.stat().st_size > 1000


def test_the_test_fold_games_are_the_same_for_every_agent() -> None:
    require("textworld_express", java=True)
    seen: list[str] = []

    def actor(obs: object) -> str:
        seen.append(str(obs)[:200])
        return "look around"

    twx_heldout.play_test_games(actor, "coin", eval_games=2, step_limit=1)
    first = list(seen)
    seen.clear()
    twx_heldout.play_test_games(actor, "coin", eval_games=2, step_limit=1)
    assert seen == first and len(first) == 4  # two games, two observations each
    with pytest.raises(ValueError, match="train, dev, test"):
        twx_heldout.play_test_games(actor, "coin", eval_games=1, step_limit=1, fold="valid")
