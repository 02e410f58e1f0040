"""``benchmarks/studies/decision_odds.py``: the probe's pieces on hand-made features, and one table on a
tiny model (the odds it reads are the policy's own decision)."""

from __future__ import annotations

import doctest
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import benchmarks.studies.decision_odds
from benchmarks.studies.decision_odds import leave_one_out, main, nearest
from gym_llm.policy.generate import GeneratedActions
from tests.models import tiny_model_fixture


def test_docstring_examples() -> None:
    assert doctest.testmod(benchmarks.studies.decision_odds).failed == 0


def test_leave_one_out_misses_a_state_that_sits_among_the_other_action() -> None:
    x = np.array([[1.0, 0.0], [0.9, 0.1], [0.95, 0.05], [0.0, 1.0], [0.1, 0.9]])
    assert leave_one_out(x, [0, 0, 1, 1, 1], 2)[2] == 0  # an exception in its features
    assert nearest(x)[0][0] in (1, 2) and nearest(x)[3][0] == 4


words_model_dir = tiny_model_fixture("words_model_dir", ["low", "high"])


@pytest.mark.parametrize("scale", [1.0, 0.0])
def test_a_table_on_a_tiny_model(
    words_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scale: float
) -> None:
    def name_the_first_action(
        self: GeneratedActions, observations: list[str], deterministic: bool
    ) -> tuple[list[np.ndarray], list[np.ndarray], torch.Tensor, None, None]:
        assert self.action_words is not None  # a tiny LM never names one on its own
        reply = np.array([7, int(self.action_words.ids[0])])
        n = len(observations)
        return [reply] * n, [np.zeros(2, dtype=np.float32)] * n, torch.zeros(n), None, None

    monkeypatch.setattr(GeneratedActions, "_generate", name_the_first_action)
    out = tmp_path / "odds.json"
    args = ["--tasks", "threshold-p0-s0", "--model", str(words_model_dir), "--json", str(out)]
    (table,) = main([*args, "--prior-scale", str(scale)])
    assert json.loads(out.read_text()) == [table]
    assert table["actions"] == ["low", "high"] and len(table["states"]) == 10
    assert table["states_naming_an_action"] == 10
    odds = np.array([state["decision_odds"] for state in table["states"]])
    np.testing.assert_allclose(odds.sum(1), 1.0, rtol=1e-6)
    if scale == 0.0:  # even odds before the head has learned anything
        np.testing.assert_allclose(odds, 0.5, atol=1e-5)
    else:  # the LM's own odds
        assert np.abs(odds - 0.5).max() > 1e-3
    for state in table["states"]:
        assert state["best"] in (0, 1) and state["probe_predicts"] in (0, 1)
