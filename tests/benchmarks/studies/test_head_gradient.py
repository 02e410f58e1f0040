"""``benchmarks/studies/head_gradient.py``: the token split and per-state figures by hand, and one
table on a tiny model whose parts add up to the whole reply's gradient."""

from __future__ import annotations

import doctest
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import benchmarks.studies.head_gradient
from benchmarks.studies.head_gradient import main, per_state_steps, token_parts
from gym_llm.policy.generate import GeneratedActions
from tests.models import tiny_model_fixture


def test_docstring_examples() -> None:
    assert doctest.testmod(benchmarks.studies.head_gradient).failed == 0


def test_only_the_first_action_word_is_the_decision() -> None:
    reply = torch.tensor([[5, 6, 5, 0]])  # names both actions; one pad
    valid = torch.tensor([[True, True, True, False]])
    parts = token_parts(reply, valid, torch.tensor([5, 6]))
    assert parts["decision"].tolist() == [[1.0, 0.0, 0.0, 0.0]]
    assert parts["wording"].tolist() == [[0.0, 1.0, 1.0, 0.0]]
    assert parts["no_action"].sum() == 0


def test_a_push_shared_by_every_state_is_all_common() -> None:
    step = np.array([[0.5, -0.5], [0.5, -0.5]])
    figures = per_state_steps(step, np.array([0, 1]), 2, right=[0, 1], favoured=[0, 0])
    assert figures["common"] == pytest.approx(1.0, abs=1e-9)
    uneven = per_state_steps(
        np.array([[0.5, -0.5], [0.2, -0.2]]), np.array([0, 1]), 2, [0, 1], [0, 0]
    )
    assert 0.5 < uneven["common"] < 1.0  # the same way, by different amounts
    assert figures["raises_right"] == 0.5 and figures["raises_favoured"] == 1.0


words_model_dir = tiny_model_fixture("words_model_dir", ["low", "high"])


def test_a_table_on_a_tiny_model(
    words_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def half_name_an_action(
        self: GeneratedActions, observations: list[str], deterministic: bool
    ) -> tuple[list[np.ndarray], list[np.ndarray], torch.Tensor, None, None]:
        assert self.action_words is not None
        words = set(self.action_words.ids.tolist())
        filler = next(t for t in range(3, 100) if t not in words and t not in self.stop_ids)
        word = int(self.action_words.ids[0])
        n = len(observations)
        replies = [
            np.array([filler, word, filler] if i % 2 else [filler, filler]) for i in range(n)
        ]
        lps = [np.zeros(len(r), dtype=np.float32) for r in replies]
        return replies, lps, torch.zeros(n), None, None

    monkeypatch.setattr(GeneratedActions, "_generate", half_name_an_action)
    out = tmp_path / "grad.json"
    args = ["--tasks", "threshold-p0-s0", "--model", str(words_model_dir), "--samples", "2"]
    (table,) = main([*args, "--json", str(out)])
    assert json.loads(out.read_text()) == [table]
    parts = table["parts"]
    assert parts["decision"]["tokens"] == 10  # one per reply that names an action
    assert parts["wording"]["tokens"] == 20
    assert parts["no_action"]["tokens"] == 20
    assert table["parts_sum_error"] < 1e-5 * max(table["head_grad_norm"], 1e-6)
    assert parts["decision"]["head_grad_norm"] > 0
