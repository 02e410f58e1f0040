"""The TD fit of PPO's action values: paced by env steps, and resumed where it stopped (no
model: features are looked up)."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
import torch

from gym_llm.rl.dqn.replay import TextReplayBuffer
from gym_llm.rl.ppo.td_values import TDFit

TABLE = {"left": torch.tensor([1.0, 0.0]), "right": torch.tensor([0.0, 1.0])}


def _features(observations: Any) -> tuple[None, torch.Tensor]:
    return None, torch.stack([TABLE[str(o)] for o in observations])


def _replay(steps: int) -> TextReplayBuffer:
    replay = TextReplayBuffer(1000, 2, 2)
    for _ in range(steps):  # one-step episodes: move 0 pays 1 on the left, 0 on the right
        replay.add_step(
            ["left", "right"], ["right", "left"], np.array([0, 0]),
            np.array([1.0, 0.0], np.float32), np.ones(2, bool), [{}, {}],
            np.full((2, 2), 0.5, np.float32),
        )  # fmt: skip
    return replay


def test_td_steps_are_paced_by_env_steps_and_learn_the_rewards() -> None:
    fit, replay = TDFit(2, 2, 0.9, seed=0), _replay(32)
    figures = fit.train(replay, _features, 64, 64)
    assert fit.td_steps == 64 * 16 // 32  # 16 replays of each env step in batches of 32
    assert figures["q_td_steps"] == fit.td_steps and np.isfinite(figures["q_loss"])
    for _ in range(10):
        fit.train(replay, _features, 64, 64)
    q = fit.q_net(_features(["left", "right"])[1])
    assert q[0, 0] > 0.5 > q[1, 0]  # move 0 is worth more on the left
    with pytest.raises(ValueError, match="replay_ratio > 0"):
        TDFit(2, 2, 0.9, replay_ratio=0)


def test_a_resumed_fit_takes_the_same_steps_as_one_that_never_stopped() -> None:
    whole, replay = TDFit(2, 2, 0.9, seed=0), _replay(32)
    whole.train(replay, _features, 48, 48)
    saved = copy.deepcopy(whole.state_dict())  # as saved to disk: Adam's moments not shared
    resumed = TDFit(2, 2, 0.9, seed=1)
    resumed.load_state_dict(copy.deepcopy(saved), resume=True)
    fresh = TDFit(2, 2, 0.9, seed=1)
    fresh.load_state_dict(copy.deepcopy(saved), resume=False)  # the heads, not the draws
    for fit in (whole, resumed, fresh):
        fit.train(replay, _features, 96, 48)
    x = _features(["left", "right"])[1]
    torch.testing.assert_close(resumed.q_net(x), whole.q_net(x), rtol=0, atol=0)
    assert resumed.td_steps == fresh.td_steps == whole.td_steps
    assert not torch.equal(fresh.q_net(x), whole.q_net(x))
