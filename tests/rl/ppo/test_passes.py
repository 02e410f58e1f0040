"""The update's passes without a model: rows per pass from the memory budget or the setting,
and the stored log-probs laid out for the loss. (That the passes step the weights as one pass
does is tested on a tiny model in ``test_ppo.py``.)"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import torch

from gym_llm.rl.ppo.config import PPOConfig
from gym_llm.rl.ppo.passes import UPDATE_MEMORY_BUDGET_MB, UpdatePasses, pad_log_probs


class _Policy:
    """What the passes ask a policy for the memory estimate."""

    def __init__(self, bytes_per_turn: int) -> None:
        self.bytes_per_turn = bytes_per_turn

    def update_bytes_per_turn(self, observations: Any, actions: Any) -> int:
        return self.bytes_per_turn


def _passes(bytes_per_turn: int, **settings: Any) -> UpdatePasses:
    policy = cast(Any, _Policy(bytes_per_turn))
    return UpdatePasses(policy, PPOConfig(**settings), torch.device("cpu"))


def test_rows_per_pass_fill_the_cpu_budget_within_the_minibatch() -> None:
    budget = UPDATE_MEMORY_BUDGET_MB * 2**20
    observations, actions = ["o"] * 64, [np.array([0])] * 64
    assert _passes(budget // 10).rows_per_pass(observations, actions) == 10
    assert _passes(1).rows_per_pass(observations, actions) == 64  # never past the minibatch
    assert _passes(budget * 4).rows_per_pass(observations, actions) == 1  # always one row


def test_a_set_micro_batch_size_wins_and_turns_then_never_share_rows() -> None:
    passes = _passes(1, micro_batch_size=3)
    assert passes.rows_per_pass(["o"] * 64, [np.array([0])] * 64) == 3
    assert not passes.rows_are_shared(cast(Any, None), lockstep=False)


def test_log_probs_of_different_lengths_are_zero_padded() -> None:
    out = pad_log_probs([np.array([-0.5]), np.array([-0.1, -0.2, -0.3])], 4, torch.device("cpu"))
    assert out.shape == (2, 4) and out.dtype == torch.float32
    want = torch.tensor([[-0.5, 0, 0, 0], [-0.1, -0.2, -0.3, 0]])
    torch.testing.assert_close(out, want)
