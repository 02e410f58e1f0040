"""``benchmarks/studies/state_replies.py``: the replies per state, their figures, and a sweep that
records them training exactly as one that does not."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.studies.state_replies import best_actions, mutual_information, reply_figures


def test_best_actions_follow_the_task_rule() -> None:
    from gym_llm.envs.family import FamilyEnv

    env = FamilyEnv("threshold-p0-s0")  # "high" (1) if the reading is 58 or more, else "low" (0)
    best = best_actions("threshold-p0-s0")
    assert len(best) == len(env.task.texts)
    for state, actions in enumerate(best):
        reading = int(env.describe(state).split()[-1].rstrip("."))
        assert actions == [1 if reading >= 58 else 0]


def test_figures_count_right_greedy_replies_sampled_mass_and_invalid() -> None:
    best = [[0], [1], [0, 1]]
    greedy = [0, -1, 1]  # right, invalid, right (either action is best)
    sampled = [[3, 1, 0], [1, 1, 2], [0, 0, 4]]  # last column: invalid replies
    f = reply_figures(best, greedy, sampled)
    assert f["greedy_right"] == 2 / 3
    assert f["greedy_distinct"] == 2.0
    assert math.isclose(f["p_right"], (3 / 4 + 1 / 4 + 0.0) / 3)
    assert math.isclose(f["invalid"], 6 / 12)


def test_mutual_information_is_zero_for_a_constant_reply_and_ln2_for_a_rule() -> None:
    assert mutual_information(np.array([[5, 0], [5, 0], [5, 0]])) == 0.0
    assert math.isclose(mutual_information(np.array([[0, 3], [3, 0]])), math.log(2))
    assert math.isnan(mutual_information(np.zeros((2, 2))))


def test_a_sweep_records_replies_and_trains_as_without_them(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    from benchmarks.recipes.family_sweep import main

    def sweep(path: Path, *extra: str) -> dict[str, Any]:
        main(["run", "--tasks", "threshold-p0-s0", "--seeds", "0", "--arms",
              "gen:policy.action_mode=generate,policy.max_new_tokens=4", "--model", str(tiny_model_dir),
              "--n-envs", "2", "--n-steps", "4", "--batch-size", "8", "--steps", "16",
              "--every", "8", "--jsonl", str(path), *extra])  # fmt: skip
        (row,) = path.read_text().splitlines()
        parsed: dict[str, Any] = json.loads(row)
        return parsed

    plain = sweep(tmp_path / "plain.jsonl")
    recorded = sweep(tmp_path / "replies.jsonl", "--replies", "3")

    def trained(row: dict[str, Any]) -> list[dict[str, Any]]:  # what the rollouts decide
        return [
            {k: v for k, v in p.items() if k != "train_s" and not k.startswith("replies")}
            for p in row["curve"]
        ]

    assert trained(recorded) == trained(plain)
    assert "approx_kl" in trained(plain)[-1]  # the sampled rollouts' update, compared too
    assert recorded["settings"]["replies"] == 3 and "replies" not in plain["settings"]
    n_states = len(recorded["best_actions"])
    for point in recorded["curve"]:
        replies = point["replies"]
        assert len(replies["greedy"]) == len(replies["greedy_action"]) == n_states
        assert [sum(row) for row in replies["sampled"]] == [3] * n_states
        assert 0.0 <= point["replies_greedy_right"] <= 1.0
        assert 0.0 <= point["replies_invalid"] <= 1.0
