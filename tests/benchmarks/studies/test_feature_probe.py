"""The feature probe's measures against hand-made cases, and one run on a tiny model."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benchmarks.studies.feature_probe import (
    Regressor,
    advantages,
    agreement,
    decision_table,
    env_name,
    env_spec,
    fit_mlp,
    fit_ridge,
    greedy_return,
    main,
    out_of_fold,
    r2,
)
from gym_llm.evaluation.exact import exact_optimum, exact_random_value


def test_r2_and_agreement_on_hand_made_predictions() -> None:
    q = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 3.0]])
    assert r2(q, q) == pytest.approx(1.0)
    assert r2(q, np.tile(q.mean(0), (3, 1))) == pytest.approx(0.0)
    # a constant shift per state leaves the advantage (what decides the action) intact
    assert r2(advantages(q), advantages(q + np.array([[5.0], [-1.0], [2.0]]))) == pytest.approx(1.0)
    # the all-tied last state does not count; one of the two others is right
    assert agreement(q, np.array([[0.0, 1.0], [0.0, 1.0], [9.0, 0.0]])) == pytest.approx(0.5)
    # either of two tied best actions is right; the worse one is not
    tied = np.array([[2.0, 2.0, 0.0]])
    assert agreement(tied, np.array([[0.0, 1.0, 0.5]])) == 1.0
    assert agreement(tied, np.array([[0.0, 0.0, 0.5]])) == 0.0


@pytest.mark.parametrize("fit", [fit_ridge, fit_mlp])
def test_out_of_fold_predictions_recover_a_linear_target_on_unseen_rows(fit: Regressor) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 5))
    y = x @ rng.normal(size=(5, 2))
    predicted = out_of_fold(x, y, fit, folds=5, seed=0)
    assert r2(y, predicted) > 0.9
    # shuffled targets: nothing to learn about unseen rows
    shuffled = y[rng.permutation(60)]
    assert r2(shuffled, out_of_fold(x, shuffled, fit, folds=5, seed=0)) < 0.3


@pytest.mark.parametrize(
    ("env_id", "kwargs", "n_states"),
    [
        ("FrozenLake-v1", {"is_slippery": False}, 11),
        ("Blackjack-v1", {"sab": False}, 280),
        (*env_spec("deck-p0-s1"), 210),  # a family task: every hand is a decision
    ],
)
def test_acting_greedily_on_q_star_is_optimal(
    env_id: str, kwargs: dict[str, Any], n_states: int
) -> None:
    states, q = decision_table(env_id, kwargs)
    assert len(states) == n_states and q.shape == (n_states, 4 if "Frozen" in env_id else 2)
    best = greedy_return(env_id, kwargs, states, q.argmax(1))
    assert best == pytest.approx(exact_optimum(env_id, kwargs), abs=1e-9)
    worst = greedy_return(env_id, kwargs, states, q.argmin(1))
    assert worst < exact_random_value(env_id, kwargs)


def test_envs_are_the_named_ones_or_family_tasks() -> None:
    assert env_spec(env_name("blackjack")) == ("Blackjack-v1", {"sab": False})
    assert env_spec(env_name("cards-p1-s1")) == ("gym_llm/Family-v0", {"task": "cards-p1-s1"})
    with pytest.raises(argparse.ArgumentTypeError, match=r"not one of blackjack.*KIND-p"):
        env_name("blackjak")


def test_probe_runs_end_to_end_on_a_tiny_model(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "probe.jsonl"
    rows = main(["--envs", "frozenlake", "--model", str(tiny_model_dir), "--jsonl", str(out)])
    assert len(rows) == 8 and len(out.read_text().splitlines()) == 8
    row = json.loads(out.read_text().splitlines()[0])
    assert row["states"] == 11 and row["optimum"] == pytest.approx(1.0)
    assert all(-1.0 <= r["gap"] <= 1.0 for r in rows)
