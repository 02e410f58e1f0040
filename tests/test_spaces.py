from __future__ import annotations

import pickle

import numpy as np
import pytest

from gym_llm.spaces import TextActions, TextObservations


def test_text_actions_lists_and_samples_valid_actions() -> None:
    space = TextActions(["stick", "hit"], seed=0)
    samples = {space.sample() for _ in range(50)}
    assert samples == {"stick", "hit"}
    assert space.contains("anything at all, even ünïcode")
    assert not space.contains(3)


def test_text_actions_open_set_uses_sampler() -> None:
    space = TextActions(None, sampler=lambda rng: f"{rng.uniform():.2f}", seed=1)
    assert 0 <= float(space.sample()) <= 1


@pytest.mark.parametrize("bad", [[], ["a", "a"], ["ok", " "]])
def test_text_actions_rejects_bad_lists(bad: list[str]) -> None:
    with pytest.raises(ValueError, match="TextActions"):
        TextActions(bad)


def test_spaces_pickle_and_compare() -> None:
    actions = TextActions(["left", "right"])
    assert pickle.loads(pickle.dumps(actions)) == actions
    assert actions != TextActions(["right", "left"])
    obs = TextObservations(instruction="Do well.")
    restored = pickle.loads(pickle.dumps(obs))
    assert restored.instruction == "Do well."
    assert restored.contains("Line one.\nLine two: 3.5 m/s, ±2°")
    assert isinstance(obs.sample(), str)
    assert np.isscalar(len(obs.sample()))
