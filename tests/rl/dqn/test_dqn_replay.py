"""The text replay buffer: n-step returns along each env's own steps, cut where data ends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from gym_llm.rl.dqn.replay import TextReplayBuffer


def _filled(rows: int, buffer_rows: int | None = None) -> TextReplayBuffer:
    """Two envs; env 0 steps s0 -> s1 -> ... with reward t, its episode terminating at t = 2;
    env 1 gets reward 10 + t and is cut (truncated) at t = 1."""
    buffer = TextReplayBuffer((buffer_rows or rows) * 2, n_envs=2, n_actions=3)
    for t in range(rows):
        buffer.add(
            [f"a{t}", f"b{t}"],
            [f"a{t + 1}", f"b{t + 1}"],
            np.array([t % 3, 1]),
            np.array([t, 10 + t]),
            np.array([t == 2, False]),
            np.array([False, t == 1]),
            np.full((2, 3), 1 / 3),
        )
    return buffer


def _sample_all(
    buffer: TextReplayBuffer, n: int, gamma: float
) -> dict[tuple[str, int], tuple[Any, ...]]:
    out = {}
    sample = buffer.sample(4000, n, gamma, np.random.default_rng(0))
    for i, obs in enumerate(sample.observations):
        out[(obs, int(sample.actions[i]))] = (
            float(sample.returns[i]),
            float(sample.discounts[i]),
            sample.next_observations[i],
        )
    return out


def test_n_step_returns_follow_each_env_and_stop_at_episode_ends() -> None:
    g = 0.5
    seen = _sample_all(_filled(5), n=3, gamma=g)
    # env 0 from t=0: rewards 0, 1, 2 and the episode terminates at t=2: no bootstrap
    assert seen[("a0", 0)] == (0 + 1 * g + 2 * g * g, 0.0, "a3")
    # env 0 from t=3: rewards 3, 4, then the data ends: cut after 2 steps, bootstrap from a5
    assert seen[("a3", 0)] == (pytest.approx(3 + 4 * g), pytest.approx(g * g), "a5")
    # env 1 from t=0: rewards 10, 11, truncated at t=1: bootstrap from its cut observation
    assert seen[("b0", 1)] == (pytest.approx(10 + 11 * g), pytest.approx(g * g), "b2")
    # env 1 from t=2: three whole steps, no end: gamma^3
    assert seen[("b2", 1)] == (pytest.approx(12 + 13 * g + 14 * g * g), pytest.approx(g**3), "b5")
    assert len(_filled(5)) == 10


def test_follows_cuts_the_return_before_the_first_action_the_policy_would_not_take() -> None:
    g = 0.5
    buffer = TextReplayBuffer(8, n_envs=1, n_actions=2)
    for t, action in enumerate([0, 0, 1, 0]):  # s0 -0-> s1 -0-> s2 -1-> s3 -0-> s4, reward 1
        buffer.add([f"s{t}"], [f"s{t + 1}"], np.array([action]), np.array([1.0]),
                   np.array([False]), np.array([False]), np.full((1, 2), 0.5))  # fmt: skip
    asked: list[str] = []

    def follows(observations: list[str], actions: np.ndarray) -> np.ndarray:
        asked.extend(observations)
        played: np.ndarray = np.asarray(actions) == 0  # a policy that plays 0 everywhere
        return played

    sample = buffer.sample(64, 3, g, np.random.default_rng(0), follows=follows)
    seen = {
        o: (float(r), float(d), n)
        for o, r, d, n in zip(sample.observations, sample.returns, sample.discounts,
                              sample.next_observations, strict=True)
    }  # fmt: skip
    # from s0 the greedy action is taken at s1 but not at s2: two rewards, bootstrap from s2
    assert seen["s0"] == (1 + g, g * g, "s2")
    # from s2 its own action counts whatever it was; s3's is greedy, then the data ends
    assert seen["s2"] == (1 + g, g * g, "s4")
    assert "None" not in asked  # rows the data does not hold are never looked up
    plain = buffer.sample(64, 3, g, np.random.default_rng(0))
    assert (1 + g + g * g) in [float(r) for r in plain.returns]  # uncut: three rewards


def test_a_full_ring_drops_the_oldest_rows_and_never_reads_across_the_seam() -> None:
    buffer = _filled(7, buffer_rows=4)  # rows t = 3..6 remain
    seen = _sample_all(buffer, n=3, gamma=1.0)
    assert {obs for obs, _ in seen} == {"a3", "a4", "a5", "a6", "b3", "b4", "b5", "b6"}
    assert seen[("a5", 2)] == (5 + 6, 1.0, "a7")  # the newest row ends the look-ahead
    assert seen[("a6", 0)] == (6, 1.0, "a7")
    assert len(buffer) == 8


def test_errors_name_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="at least one step"):
        TextReplayBuffer(1, n_envs=2, n_actions=2)
    with pytest.raises(ValueError, match="empty"):
        TextReplayBuffer(8, n_envs=2, n_actions=2).sample(4, 1, 0.9, np.random.default_rng(0))


def test_latest_steps_and_distinct_observations_read_across_the_ring() -> None:
    buffer = _filled(5, buffer_rows=3)  # rows t = 2, 3, 4 held; t = 3 and 4 wrote over 0 and 1
    observations, actions, probs = buffer.latest(2)
    assert observations.tolist() == [["a3", "b3"], ["a4", "b4"]]
    assert actions.tolist() == [[0, 1], [1, 1]] and probs.shape == (2, 2, 3)
    assert sorted(buffer.distinct_observations()) == ["a2", "a3", "a4", "b2", "b3", "b4"]
    with pytest.raises(ValueError, match="holds 3 steps"):
        buffer.latest(4)


@pytest.mark.parametrize(
    "rows, buffer_rows", [(0, 4), (3, 4), (6, 4)], ids=["empty", "part", "wrapped"]
)
def test_state_round_trips_through_a_tensor_file(
    rows: int, buffer_rows: int, tmp_path: Path
) -> None:
    """Saved with ``weights_only`` tensors and a list of texts, loaded into a fresh buffer: the
    same steps in the same ring positions, so the same draws sample the same steps."""
    buffer = _filled(rows, buffer_rows)
    torch.save(buffer.state_dict(), tmp_path / "replay.pt")
    state = torch.load(tmp_path / "replay.pt", weights_only=True)
    fresh = TextReplayBuffer(buffer_rows * 2, n_envs=2, n_actions=3)
    fresh.load_state_dict(state)
    assert len(fresh) == len(buffer) and (fresh.pos, fresh.full) == (buffer.pos, buffer.full)
    assert fresh.distinct_observations() == buffer.distinct_observations()
    if rows:
        a, b = (x.sample(64, 2, 0.9, np.random.default_rng(1)) for x in (buffer, fresh))
        assert a.observations == b.observations and a.next_observations == b.next_observations
        assert torch.equal(a.returns, b.returns) and torch.equal(a.actions, b.actions)
        assert torch.equal(a.behaviour_probs, b.behaviour_probs)


def test_a_state_of_another_shape_is_refused() -> None:
    state = _filled(3).state_dict()
    with pytest.raises(ValueError, match="Load with the saved buffer_size"):
        TextReplayBuffer(2 * 2, n_envs=2, n_actions=3).load_state_dict(state)  # 3 rows > 2
    with pytest.raises(ValueError, match="4 actions"):
        TextReplayBuffer(3 * 2, n_envs=2, n_actions=4).load_state_dict(state)


def test_a_non_finite_reward_is_never_drawn_nor_summed() -> None:
    """Env 0's reward at t = 2 is NaN: that step is never drawn, and the 3-step sums from t = 0
    and t = 1 stop before it and bootstrap from its observation ``a2``."""
    buffer = TextReplayBuffer(5 * 2, n_envs=2, n_actions=2)
    for t in range(5):
        buffer.add(
            [f"a{t}", f"b{t}"], [f"a{t + 1}", f"b{t + 1}"], np.array([0, 1]),
            np.array([np.nan if t == 2 else 1.0, 1.0]), np.zeros(2, bool), np.zeros(2, bool),
            np.full((2, 2), 0.5),
        )  # fmt: skip
    assert buffer.latest_valid(5)[:, 0].tolist() == [True, True, False, True, True]
    sample = buffer.sample(2000, 3, 0.5, np.random.default_rng(0))
    assert "a2" not in sample.observations and torch.isfinite(sample.returns).all()
    pairs = zip(sample.returns.tolist(), sample.next_observations, strict=True)
    seen = dict(zip(sample.observations, pairs, strict=True))
    assert seen["a0"] == (1.5, "a2") and seen["a1"] == (1.0, "a2")  # cut before the NaN
    assert seen["b0"] == (1.75, "b3")  # the other env's sums are untouched
    clean = TextReplayBuffer(2, n_envs=2, n_actions=2)
    clean.add(["x", "y"], ["x", "y"], np.zeros(2), np.array([np.nan, np.nan]),
              np.zeros(2, bool), np.zeros(2, bool), np.full((2, 2), 0.5))  # fmt: skip
    with pytest.raises(ValueError, match="non-finite reward"):
        clean.sample(4, 1, 0.9, np.random.default_rng(0))


def _one_state_buffer(actions: list[int], buffer_steps: int | None = None) -> TextReplayBuffer:
    """One env in one state ``s`` playing ``actions`` in turn (rewards = the step's index)."""
    buffer = TextReplayBuffer(buffer_steps or len(actions), n_envs=1, n_actions=2)
    for t, action in enumerate(actions):
        buffer.add(["s"], ["s"], np.array([action]), np.array([float(t)]),
                   np.array([False]), np.array([False]), np.full((1, 2), 0.5))  # fmt: skip
    return buffer


def test_balance_draws_a_rarely_played_move_as_often_as_a_frequent_one() -> None:
    buffer = _one_state_buffer([0] * 9 + [1])  # move 1 played once in ten
    rare = {}
    for balance in (0.0, 0.5, 1.0):
        sample = buffer.sample(20_000, 1, 0.9, np.random.default_rng(1), balance=balance)
        rare[balance] = float((sample.actions == 1).float().mean())
    assert rare[0.0] == pytest.approx(0.1, abs=0.01)
    assert rare[0.5] == pytest.approx(1 / (1 + 9**0.5), abs=0.01)  # 9 steps at 9^-0.5 each
    assert rare[1.0] == pytest.approx(0.5, abs=0.01)


def test_balance_counts_the_steps_held_now_and_leaves_the_uniform_draw_as_it_was() -> None:
    buffer = _one_state_buffer([1] + [0] * 9 + [1] * 4, buffer_steps=10)  # the ring drops 4
    sample = buffer.sample(20_000, 1, 0.9, np.random.default_rng(2), balance=1.0)
    assert float((sample.actions == 1).float().mean()) == pytest.approx(0.5, abs=0.01)
    assert set(sample.returns.tolist()) == set(map(float, range(4, 14)))  # only rows held
    plain = [buffer.sample(64, 1, 0.9, np.random.default_rng(3), balance=b).returns
             for b in (0.0, 0.0)]  # fmt: skip
    assert torch.equal(*plain)
    uniform = buffer.sample(64, 1, 0.9, np.random.default_rng(3))
    assert torch.equal(uniform.returns, plain[0])  # balance 0 is the draw without it


def test_balance_never_draws_a_step_with_a_non_finite_reward() -> None:
    buffer = _one_state_buffer([0, 0, 1])
    buffer.add(["s"], ["s"], np.array([1]), np.array([np.nan]),
               np.array([False]), np.array([False]), np.full((1, 2), 0.5))  # fmt: skip
    sample = buffer.sample(2_000, 1, 0.9, np.random.default_rng(0), balance=1.0)
    assert torch.isfinite(sample.returns).all()
    assert float((sample.actions == 1).float().mean()) == pytest.approx(0.5, abs=0.04)
    with pytest.raises(ValueError, match="balance must be >= 0"):
        buffer.sample(4, 1, 0.9, np.random.default_rng(0), balance=-1.0)


def test_balance_reads_the_steps_held_after_the_ring_turns_once_between_draws() -> None:
    buffer = _one_state_buffer([0, 0, 0, 1])  # holds 4 steps: a full turn brings back the position
    first = buffer.sample(20_000, 1, 0.9, np.random.default_rng(0), balance=0.5)
    for action in (1, 0, 0, 0):  # the rare move now in the first slot
        buffer.add(["s"], ["s"], np.array([action]), np.array([0.0]),
                   np.array([False]), np.array([False]), np.full((1, 2), 0.5))  # fmt: skip
    second = buffer.sample(20_000, 1, 0.9, np.random.default_rng(0), balance=0.5)
    share = 1 / (1 + 3**0.5)  # one step of a move against three of the other, at 3^-0.5 each
    assert float((first.actions == 1).float().mean()) == pytest.approx(share, abs=0.01)
    assert float((second.actions == 1).float().mean()) == pytest.approx(share, abs=0.01)
    assert float(second.returns[second.actions == 1].mean()) == 0.0  # the new step, not the old


def test_plays_count_each_moves_valid_steps_held_as_the_ring_turns_and_after_loading() -> None:
    buffer = _one_state_buffer([0, 0, 1], buffer_steps=4)
    assert buffer.plays(["s", "never"]).tolist() == [[2, 1], [0, 0]]
    for action, reward in ((1, 0.0), (1, np.nan), (1, 0.0)):  # the ring drops two 0s
        buffer.add(["s"], ["s"], np.array([action]), np.array([reward]),
                   np.array([False]), np.array([False]), np.full((1, 2), 0.5))  # fmt: skip
    assert buffer.plays(["s"]).tolist() == [[0, 3]]  # the non-finite step is not a play
    held = buffer.observations.ravel(), buffer.actions.ravel(), buffer.valid.ravel()
    recount = [int(((held[0] == "s") & (held[1] == a) & held[2]).sum()) for a in (0, 1)]
    assert recount == [0, 3]
    again = TextReplayBuffer(4, n_envs=1, n_actions=2)
    again.load_state_dict(buffer.state_dict())
    assert again.plays(["s"]).tolist() == [[0, 3]]
