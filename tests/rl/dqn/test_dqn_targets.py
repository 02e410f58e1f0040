"""The TD target and the posterior against hand-computed values (no model)."""

from __future__ import annotations

import math

import pytest
import torch

from gym_llm.rl.dqn.targets import (
    advantage_learning,
    double_q_target,
    n_step_returns,
    posterior_logits,
)
from gym_llm.rl.dqn.td import td_loss


def test_posterior_is_prior_to_the_beta_times_exp_q_over_alpha() -> None:
    q = torch.tensor([[1.0, 0.0, -1.0]])
    prior = torch.log(torch.tensor([[0.1, 0.6, 0.3]]))
    got = torch.softmax(posterior_logits(q, prior, alpha=0.5, beta=1.0), -1)
    naive = torch.tensor([[0.1 * math.exp(2.0), 0.6, 0.3 * math.exp(-2.0)]])
    torch.testing.assert_close(got, naive / naive.sum())
    # beta = 0 ignores the prior, even one that rules an action out
    ruled_out = torch.tensor([[0.0, float("-inf"), 0.0]])
    torch.testing.assert_close(posterior_logits(q, ruled_out, 1.0, 0.0), q)
    with pytest.raises(ValueError, match="alpha"):
        posterior_logits(q, prior, alpha=0.0, beta=1.0)


def test_n_step_returns_stop_at_the_first_end() -> None:
    g = 0.9
    rewards = torch.tensor([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0], [1.0, 2.0, 3.0], [5.0, 7.0, 9.0]])
    terminated = torch.tensor([[0, 0, 0], [0, 1, 0], [0, 0, 0], [1, 0, 0]])
    truncated = torch.tensor([[0, 0, 0], [0, 0, 0], [0, 1, 0], [0, 0, 0]])
    returns, discount, last = n_step_returns(rewards, terminated, terminated | truncated, g)
    # no end: 3 steps, bootstrap gamma^3 from the third step's next observation
    assert returns[0].item() == pytest.approx(1 + 2 * g + 3 * g * g)
    assert discount[0].item() == pytest.approx(g**3) and last[0].item() == 2
    # terminated at the second step: two rewards, nothing after
    assert returns[1].item() == pytest.approx(1 + 2 * g)
    assert discount[1].item() == 0.0 and last[1].item() == 1
    # truncated at the second step: two rewards, bootstrap gamma^2 from the cut observation
    assert returns[2].item() == pytest.approx(1 + 2 * g)
    assert discount[2].item() == pytest.approx(g**2) and last[2].item() == 1
    # terminated at once: one-step return only
    assert returns[3].item() == 5.0 and discount[3].item() == 0.0 and last[3].item() == 0
    with pytest.raises(ValueError, match="shape"):
        n_step_returns(rewards, terminated[:, :2], terminated, g)


def test_double_q_target_lets_the_online_net_pick_and_the_target_net_score() -> None:
    returns, discount = torch.tensor([1.0, 1.0, 0.5]), torch.tensor([0.9, 0.9, 0.0])
    online = torch.tensor([[0.0, 5.0], [3.0, 1.0], [float("nan"), 0.0]])
    target = torch.tensor([[10.0, 2.0], [4.0, 20.0], [float("inf"), 0.0]])
    flat = torch.zeros(3, 2)
    got = double_q_target(returns, discount, online, target, flat, alpha=1.0, beta=0.0)
    # row 0: online picks 1, target scores 2; row 1: online picks 0, target scores 4;
    # row 2: terminated, non-finite next values never reach the target
    torch.testing.assert_close(got, torch.tensor([1 + 0.9 * 2.0, 1 + 0.9 * 4.0, 0.5]))
    # with the prior, a strong prior overrules a small Q difference in picking a*
    prior = torch.log(torch.tensor([[0.99, 0.01], [0.5, 0.5], [0.5, 0.5]]))
    q_close = torch.tensor([[0.0, 1.0], [3.0, 1.0], [0.0, 0.0]])
    got = double_q_target(returns, discount, q_close, target, prior, alpha=1.0, beta=1.0)
    assert got[0].item() == pytest.approx(1 + 0.9 * 10.0)


def _fixed_point(share: float, gamma: float = 0.9) -> torch.Tensor:
    """Exact value iteration with the advantage-learning target on a 3-state corridor: move
    right (action 1) towards a reward of 1 at its end, or bump into the wall (action 0)."""
    n_states, moves = 3, torch.tensor([[0, 1], [1, 2], [2, 2]])
    reward = torch.tensor([[0.0, 0.0], [0.0, 0.0], [0.0, 1.0]])
    ends = torch.tensor([[False, False], [False, False], [False, True]])
    q = torch.zeros(n_states, 2)
    actions = torch.tensor([0, 1]).repeat(n_states)
    for _ in range(2000):
        target = reward + gamma * torch.where(ends, 0.0, q.max(-1).values[moves])
        q_now = q.repeat_interleave(2, 0)
        q = advantage_learning(target.reshape(-1), q_now, actions, share).reshape(n_states, 2)
    return q


def test_advantage_learning_keeps_the_greedy_moves_and_widens_the_gaps() -> None:
    plain, widened = _fixed_point(0.0), _fixed_point(0.75)
    assert torch.equal(plain.argmax(-1), widened.argmax(-1))
    torch.testing.assert_close(widened.max(-1).values, plain.max(-1).values)  # V* unchanged
    gaps = plain.max(-1, keepdim=True).values - plain
    wide = widened.max(-1, keepdim=True).values - widened
    assert float(gaps.min()) == 0 and float(gaps.max()) > 0.05
    torch.testing.assert_close(wide, gaps / (1 - 0.75))  # four times the gap to the best
    for share in (-0.1, 1.0):
        with pytest.raises(ValueError, match="gap_increase"):
            advantage_learning(torch.zeros(1), torch.zeros(1, 2), torch.tensor([0]), share)


def test_the_huber_fit_of_a_noisy_reward_leans_to_the_median_and_the_squared_fit_is_the_mean() -> (
    None
):
    # A move that wins (+1) 40 % of the time and loses (-1) otherwise: its value is -0.2.
    targets = torch.tensor([1.0] * 4 + [-1.0] * 6)
    grid = torch.linspace(-1, 1, 2001)

    def fit(delta: float) -> float:
        losses = [float(td_loss(q.expand(10), targets, delta)) for q in grid]
        return float(grid[int(torch.tensor(losses).argmin())])

    assert fit(math.inf) == pytest.approx(-0.2, abs=1e-3)  # the mean
    # SB3's threshold: the win's error (1.2) is past it and pulls no harder than 1, so the
    # fit settles where 0.6 (q + 1) = 0.4, a third below the value.
    assert fit(1.0) == pytest.approx(-1 / 3, abs=1e-3)
    assert fit(2.5) == pytest.approx(-0.2, abs=1e-3)  # every error within it: the mean again
