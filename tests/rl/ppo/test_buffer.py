"""Invariant 2: GAE matches a hand-computed reference (truncation bootstrap, episode starts)."""

from __future__ import annotations

import numpy as np
import torch

from gym_llm.rl.ppo.buffer import (
    TextBatch,
    TextRolloutBuffer,
    grouped_passes,
    least_padding_cuts,
)


def reference_gae(rewards, values, starts, last_values, last_dones, gamma, lam):
    """Textbook GAE, written independently of SB3: delta_t = r_t + g V_{t+1} (1 - done_t) - V_t."""
    steps, envs = rewards.shape
    adv = np.zeros_like(rewards)
    for e in range(envs):
        running = 0.0
        for t in reversed(range(steps)):
            if t == steps - 1:
                next_nonterminal, next_value = 1.0 - last_dones[e], last_values[e]
            else:
                next_nonterminal, next_value = 1.0 - starts[t + 1, e], values[t + 1, e]
            delta = rewards[t, e] + gamma * next_value * next_nonterminal - values[t, e]
            running = delta + gamma * lam * next_nonterminal * running
            adv[t, e] = running
    return adv, adv + values


def _fill(buffer: TextRolloutBuffer, rewards, values, starts) -> None:
    for t in range(rewards.shape[0]):
        n = rewards.shape[1]
        buffer.add_turns(
            np.array([f"obs {t} {e}" for e in range(n)], dtype=object),
            ["reply"] * n,
            [np.array([1, 2]) for _ in range(n)],
            [np.array([-0.5, -0.25], dtype=np.float32) for _ in range(n)],
            rewards[t],
            starts[t],
            torch.as_tensor(values[t]),
        )


def test_gae_matches_hand_computed_reference() -> None:
    rng = np.random.default_rng(0)
    steps, envs, gamma, lam = 6, 3, 0.9, 0.8
    rewards = rng.normal(size=(steps, envs)).astype(np.float32)
    values = rng.normal(size=(steps, envs)).astype(np.float32)
    starts = np.zeros((steps, envs), dtype=np.float32)
    starts[0] = 1
    starts[3, 0] = 1  # env 0: an episode ended after step 2
    starts[2, 2] = 1
    # env 1: its episode was truncated after step 4; the collector adds gamma * V(terminal obs)
    # to that reward (the bootstrap), and the next step starts a new episode.
    terminal_value = 2.5
    rewards[4, 1] += gamma * terminal_value
    starts[5, 1] = 1
    last_values = np.array([0.3, -0.7, 1.1], dtype=np.float32)
    last_dones = np.array([0.0, 1.0, 0.0], dtype=np.float32)

    buffer = TextRolloutBuffer(steps, envs, gamma=gamma, gae_lambda=lam)
    _fill(buffer, rewards, values, starts)
    buffer.compute_returns_and_advantage(torch.as_tensor(last_values), last_dones.astype(bool))
    adv, ret = reference_gae(rewards, values, starts, last_values, last_dones, gamma, lam)
    np.testing.assert_allclose(buffer.advantages, adv, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(buffer.returns, ret, rtol=1e-5, atol=1e-6)
    # Hand check of one entry: env 0, step 2 ends an episode -> advantage is r - V.
    assert np.isclose(buffer.advantages[2, 0], rewards[2, 0] - values[2, 0], atol=1e-6)


def test_minibatches_cover_every_turn_once() -> None:
    buffer = TextRolloutBuffer(4, 2)
    rewards = np.arange(8, dtype=np.float32).reshape(4, 2)
    _fill(buffer, rewards, np.zeros((4, 2), np.float32), np.zeros((4, 2), np.float32))
    buffer.compute_returns_and_advantage(torch.zeros(2), np.zeros(2, dtype=bool))
    seen = [o for b in buffer.minibatches(3, np.random.default_rng(0)) for o in b.observations]
    assert sorted(seen) == sorted(f"obs {t} {e}" for t in range(4) for e in range(2))
    assert np.isclose(buffer.log_probs, -0.75).all()


def test_grouped_passes_keep_each_observation_in_one_pass_within_the_fit() -> None:
    keys = ["a", "b", "a", "c", "b", "d", "a"]
    order, passes = grouped_passes(keys, fit=2)
    assert sorted(order) == list(range(len(keys)))
    rows = [[keys[i] for i in order[part]] for part in passes]
    assert all(len(set(r)) <= 2 for r in rows)
    assert sum(len(r) for r in rows) == len(keys)
    for key in set(keys):  # every turn of an observation in the same pass
        assert sum(key in r for r in rows) == 1
    assert grouped_passes(["x", "x"], fit=1) == ([0, 1], [slice(0, 2)])
    assert grouped_passes([], fit=2) == ([], [slice(0, 0)])


def test_a_batch_taken_in_another_order_keeps_each_turn_whole() -> None:
    batch = TextBatch(
        observations=["a", "b", "c"],
        actions=[np.array([0]), np.array([1]), np.array([2])],
        old_token_log_probs=[np.array([-0.1]), np.array([-0.2]), np.array([-0.3])],
        old_values=torch.tensor([1.0, 2.0, 3.0]),
        advantages=torch.tensor([10.0, 20.0, 30.0]),
        returns=torch.tensor([4.0, 5.0, 6.0]),
    )
    taken = batch.take([2, 0])
    assert taken.observations == ["c", "a"] and taken.states is None
    assert [int(a[0]) for a in taken.actions] == [2, 0]
    assert taken.advantages.tolist() == [30.0, 10.0] and taken.returns.tolist() == [6.0, 4.0]
    assert taken.old_values.tolist() == [3.0, 1.0]
    assert [float(lp[0]) for lp in taken.old_token_log_probs] == [-0.3, -0.1]


def test_grouped_passes_with_lengths_put_rows_of_similar_length_together() -> None:
    keys = ["a", "b", "c", "d", "a", "e", "f"]
    lengths = [5, 20, 6, 21, 5, 19, 4]
    order, passes = grouped_passes(keys, fit=3, lengths=lengths)
    widths = [[lengths[i] for i in order[part]] for part in passes]
    assert widths == [[4, 5, 5, 6], [19, 20, 21]]  # padding 4 + 3 positions; 44 + 19 unsorted
    rows = [[keys[i] for i in order[part]] for part in passes]
    assert rows[0].count("a") == 2  # an observation's turns stay in one pass
    # one pass: the order of first appearance, as without lengths
    assert grouped_passes(keys, fit=9, lengths=lengths) == grouped_passes(keys, fit=9)


def test_least_padding_cuts_put_the_short_pass_where_it_saves_most() -> None:
    # Blackjack's rows: most prompts 43-46 tokens, a few 53-54; 42 rows fit a pass
    lengths = sorted([45] * 25 + [46] * 9 + [53] * 5 + [54] * 3 + [43] + [44] * 10 + [45])
    sizes = least_padding_cuts(lengths, fit=42)
    assert sizes == [42, 12] and sum(sizes) == len(lengths)
    assert least_padding_cuts([1, 1, 9, 9], fit=2) == [2, 2]
    assert least_padding_cuts([1, 2, 3], fit=1) == [1, 1, 1]
    assert least_padding_cuts([], fit=4) == [] and least_padding_cuts([3, 4], fit=8) == [2]
    # as few passes as the fit allows, each within it, even when more would pad less
    assert least_padding_cuts([1, 1, 1, 9, 9], fit=3) == [3, 2]


def test_least_padding_cuts_match_every_cut_tried_by_hand() -> None:
    import itertools
    import random

    def area(lengths: list[int], sizes: list[int]) -> int:
        ends = np.cumsum(sizes)
        return sum(lengths[end - 1] * size for end, size in zip(ends, sizes, strict=True))

    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(2, 9)
        fit = rng.randint(1, n)
        lengths = sorted(rng.randint(1, 20) for _ in range(n))
        passes = -(-n // fit)
        every = [
            [b - a for a, b in zip((0, *cuts), (*cuts, n), strict=True)]
            for cuts in itertools.combinations(range(1, n), passes - 1)
        ]
        least = min(area(lengths, s) for s in every if max(s) <= fit)
        sizes = least_padding_cuts(lengths, fit)
        assert len(sizes) == passes and max(sizes) <= fit and sum(sizes) == n
        assert area(lengths, sizes) == least
