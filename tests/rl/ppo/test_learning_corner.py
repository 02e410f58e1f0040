"""Out of the softmax corner: a contextual two-armed bandit whose better arm starts at p ~ 0.003.

A tiny randomly initialised model on HighLow whose tokenizer knows ``low`` and ``hig`` as words:
``high`` is then two tokens and its prior is 0.0028-0.0033 in every state (seeds 0-3, measured),
like SmolLM2's 0.4 % for Blackjack's ``hit``. The policy gradient on a rare action is damped to
``p (1 - p) A``, and the rare action is almost never sampled, so the plain policy stays at "always
low" (success 0.5). Choice calibration subtracts each action's score after a content-free prompt,
so the policy starts near 50/50 in every state and learns. Checked over seeds 0-9 (``python -m
benchmarks.recipes.learning_sweep --modes corner corner-plain corner-head``, RESULTS.md; again with PPO's defaults, the
action values and the floor on every move: 10 of 10, the plain policy at 0.5 on all 10): the test asserts
the defaults' worst seed with a margin, and that the plain policy stays in the corner.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.recipes.learning_recipes import CORNER_AT_MOST, check_high_low, train_corner


@pytest.mark.parametrize("seed", [0, 1])
def test_the_defaults_leave_the_corner(tmp_path: Path, seed: int, one_torch_thread: None) -> None:
    check_high_low(*train_corner(tmp_path, seed))


def test_the_plain_policy_stays_in_the_corner(tmp_path: Path, one_torch_thread: None) -> None:
    before, curve = train_corner(tmp_path, 0, "plain")
    assert before <= CORNER_AT_MOST and max(curve) <= CORNER_AT_MOST, (before, curve)
